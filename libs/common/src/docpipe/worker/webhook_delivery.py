"""Completion webhooks: one signed POST per attempt, every attempt recorded, retried with
backoff through the outbox.

Signatures follow Standard Webhooks (https://www.standardwebhooks.com), so receivers verify
them with its libraries (``standardwebhooks.Webhook(secret).verify(body, headers)``):

- ``webhook-id``: the delivery's message id, the same on every attempt (deduplicate on it);
- ``webhook-timestamp``: Unix seconds of this attempt (reject old ones: replays);
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`` with the
  tenant's secret; during a rotation window a second signature, with the previous secret,
  follows after a space.

The request goes through docpipe.worker.webhook_request (destination checked after
resolution and pinned, one deadline, capped read). The attempt is claimed before it starts
and recorded however it ends: an exception escaping it (the soft time limit included) is
recorded as ``interrupted``; a worker killed outright leaves it to the reaper.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks import Webhook

from docpipe.broker.queues import WEBHOOK_QUEUE
from docpipe.destinations import DestinationPolicy, DestinationRefused
from docpipe.settings import Settings
from docpipe.state import webhooks
from docpipe.state.db import Database
from docpipe.state.webhook_secrets import UnreadableSecret, signing_secrets
from docpipe.worker.webhook_request import RequestFailed, Resolver, post_pinned, resolve_host

__all__ = ["USER_AGENT", "deliver_webhook", "signature_headers"]

log = logging.getLogger(__name__)

USER_AGENT = "docpipe-webhooks/1"


def signature_headers(
    secrets: Sequence[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The Standard Webhooks headers of ``body``, signed with each of ``secrets``."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    text = body.decode()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(Webhook(s).sign(message_id, moment, text) for s in secrets),
    }


def deliver_webhook(
    db: Database,
    settings: Settings,
    delivery_id: int,
    *,
    resolver: Resolver = resolve_host,
    verify: ssl.SSLContext | bool = True,
) -> str | None:
    """One attempt, recorded however it ends; a failure parks the next one in the outbox.
    Returns the delivery's status after the attempt, or why no attempt was made ('busy',
    'not_due', 'in_flight', 'ended')."""
    claim = webhooks.claim_attempt(
        db,
        delivery_id,
        # An attempt cannot outlive the task's hard time limit: the worker is killed then.
        lease_s=settings.task_time_limit_s,
        tenant_limit=settings.webhook_tenant_concurrency,
        limit=settings.webhook_concurrency,
        queue=WEBHOOK_QUEUE,
    )
    if (attempt := claim.attempt) is None:
        log.debug("webhook %s: no attempt now (%s)", delivery_id, claim.refusal)
        return claim.refusal
    http_status: int | None = None
    error: str | None = webhooks.INTERRUPTED  # unless the attempt returns
    try:
        http_status, error = _attempt(db, settings, attempt, resolver, verify)
    finally:
        attempted = webhooks.record_attempt(
            db,
            attempt,
            http_status=http_status,
            error=error,
            queue=WEBHOOK_QUEUE,
            retry=webhooks.RetryPolicy.from_settings(settings),
        )
    if attempted is None:
        return None
    if error is not None:
        log.info(
            "webhook %s attempt %d: %s (%s)",
            delivery_id,
            attempted.attempts,
            error,
            attempted.status,
        )
    return attempted.status


def _attempt(
    db: Database,
    settings: Settings,
    attempt: webhooks.ClaimedAttempt,
    resolver: Resolver,
    verify: ssl.SSLContext | bool,
) -> tuple[int | None, str | None]:
    """(HTTP status, the error a tenant may see: None when delivered)."""
    key = settings.secrets_key.get_secret_value()
    try:
        secrets = signing_secrets(db, key, attempt.tenant_id) if key else []
    except UnreadableSecret as exc:
        log.error("webhook %s: %s", attempt.id, exc)
        secrets = []
    if not secrets:
        return None, webhooks.NO_SECRET
    body = json.dumps(attempt.payload, separators=(",", ":"), default=str).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signature_headers(secrets, attempt.message_id, int(time.time()), body),
    }
    try:
        answer = post_pinned(
            attempt.url,
            body,
            headers,
            policy=DestinationPolicy.from_allowlist(settings.webhook_allowed_destinations),
            deadline_s=settings.webhook_timeout_s,
            max_response_bytes=settings.webhook_max_response_bytes,
            resolver=resolver,
            verify=verify,
        )
    except DestinationRefused as exc:
        # The reason is for operators; the tenant learns only that it was refused.
        log.warning("webhook %s refused: %s", attempt.id, exc)
        return None, webhooks.REFUSED
    except RequestFailed as exc:
        log.info("webhook %s: %s", attempt.id, exc)
        return None, exc.kind
    if 200 <= answer.status < 300:
        return answer.status, None
    return answer.status, webhooks.http_error(answer.status)
