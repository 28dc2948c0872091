"""Webhook deliveries: queued when a run or batch with a callback URL ends, and every attempt
recorded, interrupted ones included (the HTTP request itself is docpipe.worker.webhook_delivery's).

An attempt is claimed before its request leaves: the claim marks it in flight until a lease
runs out, and counts the attempts in flight so that one tenant, and all tenants together,
keep at most DOCPIPE_WEBHOOK_TENANT_CONCURRENCY and DOCPIPE_WEBHOOK_CONCURRENCY. The attempt
ends recorded by its worker, or, when the worker died, by the reaper as ``interrupted``.
A delivery still pending is parked in the outbox until its next attempt is due; the reaper
re-sends those whose message was lost.

What a tenant sees of an attempt is one of the generic texts below (and the HTTP status of
an answer): never the receiver's body, the exception, or anything that tells an open port
from a closed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from docpipe.backoff import retry_delay
from docpipe.settings import Settings
from docpipe.state.db import Database, Session
from docpipe.statuses import DeliveryStatus

__all__ = [
    "CONNECTION_FAILED",
    "INTERRUPTED",
    "NO_SECRET",
    "REFUSED",
    "TIMEOUT",
    "Attempted",
    "Claim",
    "ClaimedAttempt",
    "RetryPolicy",
    "claim_attempt",
    "http_error",
    "park_attempt",
    "queue_webhooks",
    "reap_interrupted_attempts",
    "record_attempt",
    "redrive_lost_deliveries",
]

# The errors a tenant may see.
REFUSED = "refused: destination not allowed"
TIMEOUT = "timeout"
CONNECTION_FAILED = "connection failed"
INTERRUPTED = "interrupted"
NO_SECRET = "no signing secret"  # noqa: S105  (an error text, not a password)

# Key of the transaction-scoped advisory lock that serialises claims ("dpwh" "clai").
_CLAIM_LOCK_KEY = 0x64707768_636C6169
# A delivery whose tenant has no free place waits about this long before it looks again.
_BUSY_RETRY_S = 1.0


def http_error(status: int) -> str:
    return f"HTTP {status}"


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_s: float
    cap_s: float = 600.0

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        return cls(settings.webhook_max_attempts, settings.webhook_retry_base_s)

    def delay_s(self, attempt: int) -> float:
        """Seconds before the attempt after attempt number ``attempt``."""
        return retry_delay(attempt, base_s=self.base_s, cap_s=self.cap_s)


@dataclass(frozen=True)
class ClaimedAttempt:
    id: int
    tenant_id: str
    url: str
    payload: dict[str, Any]
    message_id: str
    attempts: int  # before this one


@dataclass(frozen=True)
class Claim:
    """The outcome of a claim: an attempt to make now, or why there is none."""

    attempt: ClaimedAttempt | None
    # 'busy': the tenant or everyone has no free place (parked, looks again shortly);
    # 'not_due' / 'in_flight' / 'ended': a duplicate or stale message, nothing to do.
    refusal: Literal["busy", "not_due", "in_flight", "ended"] | None = None


@dataclass(frozen=True)
class Attempted:
    id: int
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


def claim_attempt(
    db: Database,
    delivery_id: int,
    *,
    lease_s: float,
    tenant_limit: int,
    limit: int,
    queue: str,
) -> Claim:
    """Start an attempt of the delivery if it is pending, due, not in flight, and its tenant
    and everyone have a free place; a delivery that only lacks a place is parked to look
    again shortly (that is not an attempt)."""
    with db.transaction() as tx:
        tx.one("webhook_claim_lock", key=_CLAIM_LOCK_KEY)
        attempt = tx.one_as(
            ClaimedAttempt,
            "claim_webhook_attempt",
            id=delivery_id,
            lease_s=lease_s,
            tenant_limit=tenant_limit,
            limit=limit,
        )
        if attempt is not None:
            return Claim(attempt)
        state = tx.one("webhook_delivery_state", id=delivery_id)
        if state is None or state["status"] != DeliveryStatus.PENDING:
            return Claim(None, "ended")
        if state["in_flight"]:
            return Claim(None, "in_flight")
        if not state["due"]:
            return Claim(None, "not_due")
        park_attempt(tx, delivery_id, queue=queue, delay_s=_BUSY_RETRY_S)
    return Claim(None, "busy")


def park_attempt(tx: Session, delivery_id: int, *, queue: str, delay_s: float) -> list[int]:
    """Set when the pending delivery's next attempt is due and park its message in the
    outbox until then (the sweep publishes it); returns the outbox ids."""
    rows = tx.all("park_webhook_attempt", id=delivery_id, queue=queue, delay_s=delay_s)
    return [r["id"] for r in rows]


def record_attempt(
    db: Database,
    attempt: ClaimedAttempt,
    *,
    http_status: int | None,
    error: str | None,
    retry: RetryPolicy,
    queue: str,
) -> Attempted | None:
    """End the claimed attempt and count it: delivered (no error), failed once attempts run
    out, else pending with its next attempt parked, in one transaction. None when the attempt
    was no longer in flight (the reaper recorded it as interrupted)."""
    with db.transaction() as tx:
        attempted = tx.one_as(
            Attempted,
            "record_webhook_attempt",
            id=attempt.id,
            http_status=http_status,
            error=error,
            delivered=error is None,
            max_attempts=retry.max_attempts,
        )
        if attempted is not None and attempted.status == DeliveryStatus.PENDING:
            park_attempt(tx, attempt.id, queue=queue, delay_s=retry.delay_s(attempted.attempts))
    return attempted


def reap_interrupted_attempts(db: Database, *, retry: RetryPolicy, queue: str) -> list[int]:
    """Record attempts whose worker died mid-way (lease over) as interrupted, and park the
    next attempt of those still pending; returns their deliveries' ids."""
    with db.transaction() as tx:
        reaped = tx.all_as(
            Attempted,
            "reap_interrupted_webhook_attempts",
            error=INTERRUPTED,
            max_attempts=retry.max_attempts,
        )
        for attempted in reaped:
            if attempted.status == DeliveryStatus.PENDING:
                park_attempt(
                    tx, attempted.id, queue=queue, delay_s=retry.delay_s(attempted.attempts)
                )
    return [a.id for a in reaped]


def redrive_lost_deliveries(
    db: Database, *, queue: str, grace_s: float, cutoff: datetime
) -> tuple[int, ...]:
    """Re-enqueue pending deliveries whose message is gone (sent before ``cutoff``, the
    moment before which nothing can still wait in the queue); returns the outbox ids."""
    rows = db.all("redrive_lost_webhooks", queue=queue, grace_s=grace_s, cutoff=cutoff)
    return tuple(r["id"] for r in rows)
