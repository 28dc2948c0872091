"""Webhook deliveries: queued when a run or batch with a callback URL ends, and every
delivery attempt recorded (the HTTP request itself is docpipe.worker.webhook_delivery's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from docpipe.state.db import Database

__all__ = ["Delivery", "queue_webhooks", "record_attempt", "schedule_retry", "to_deliver"]


@dataclass(frozen=True)
class Delivery:
    id: int
    url: str
    payload: dict[str, Any]
    attempts: int


@dataclass(frozen=True)
class Attempted:
    status: str  # DeliveryStatus
    attempts: int


def queue_webhooks(db: Database, queue: str) -> tuple[int, ...]:
    """Create deliveries for runs and batches that ended since the last pass; returns the
    outbox ids to publish."""
    with db.transaction() as tx:
        rows = tx.all("queue_run_webhooks", queue=queue) + tx.all(
            "queue_batch_webhooks", queue=queue
        )
    return tuple(r["id"] for r in rows)


def to_deliver(db: Database, delivery_id: int) -> Delivery | None:
    """The delivery if it is still pending."""
    return db.one_as(Delivery, "webhook_to_deliver", id=delivery_id)


def record_attempt(
    db: Database,
    delivery_id: int,
    *,
    http_status: int | None,
    error: str | None,
    max_attempts: int,
) -> Attempted | None:
    """Count one attempt: the delivery ends as delivered, or failed once attempts run out."""
    return db.one_as(
        Attempted,
        "record_webhook_attempt",
        id=delivery_id,
        http_status=http_status,
        error=error,
        delivered=error is None,
        max_attempts=max_attempts,
    )


def schedule_retry(db: Database, delivery_id: int, *, queue: str, delay_s: float) -> None:
    """Park the delivery's next attempt in the outbox until it is due."""
    db.execute("schedule_webhook_retry", id=delivery_id, queue=queue, delay_s=delay_s)
