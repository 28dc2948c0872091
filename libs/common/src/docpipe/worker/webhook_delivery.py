"""Completion webhooks: one signed POST per attempt, retried with backoff through the outbox.

Signature (like Stripe's): header ``Docpipe-Signature: t=<unix time>,v1=<hex>`` where hex
is HMAC-SHA256 with DOCPIPE_WEBHOOK_SECRET over ``"<t>.<raw body>"``. Receivers recompute
it and reject old timestamps to stop replays.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time

import httpx

from docpipe.backoff import retry_delay
from docpipe.settings import Settings
from docpipe.state import webhooks
from docpipe.state.db import Database
from docpipe.statuses import DeliveryStatus

__all__ = ["SIGNATURE_HEADER", "deliver_webhook", "sign"]

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "Docpipe-Signature"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def deliver_webhook(
    db: Database, settings: Settings, delivery_id: int, queue: str, client: httpx.Client
) -> str | None:
    """One delivery attempt; a failure parks the next one in the outbox. Returns the
    delivery's status after the attempt (None if it was not pending)."""
    delivery = webhooks.to_deliver(db, delivery_id)
    if delivery is None:
        return None
    body = json.dumps(delivery.payload, separators=(",", ":"), default=str).encode()
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(settings.webhook_secret.get_secret_value(), int(time.time()), body),
        "Docpipe-Delivery": str(delivery_id),
    }
    http_status: int | None = None
    error: str | None = None
    try:
        response = client.post(delivery.url, content=body, headers=headers,
                               timeout=settings.webhook_timeout_s)  # fmt: skip
        http_status = response.status_code
        if not response.is_success:
            error = f"receiver answered {http_status}"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
    attempted = webhooks.record_attempt(
        db,
        delivery_id,
        http_status=http_status,
        error=error,
        max_attempts=settings.webhook_max_attempts,
    )
    if attempted is None:
        return None
    if attempted.status == DeliveryStatus.PENDING:
        delay = retry_delay(attempted.attempts, base_s=settings.webhook_retry_base_s, cap_s=600.0)
        webhooks.schedule_retry(db, delivery_id, queue=queue, delay_s=delay)
        log.info("webhook %s attempt %d failed (%s); next in %.0fs", delivery_id,
                 attempted.attempts, error, delay)  # fmt: skip
    return str(attempted.status)
