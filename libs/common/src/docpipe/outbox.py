"""The transactional outbox: messages are written with the state change that wants them and
published after it commits; a sweep publishes what a crash left behind.

Publishing is at-least-once (a crash after sending but before marking sends again later);
consumers are idempotent, so a duplicate costs a no-op claim, never a second provider call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from docpipe.db import Database, Row, Session

__all__ = ["Broker", "OutboxMessage", "publish_outbox", "sweep_outbox"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OutboxMessage:
    id: int
    topic: str  # 'step' | 'webhook'
    run_id: str | None
    step: str | None
    queue: str
    traceparent: str | None
    payload: dict[str, Any]

    @classmethod
    def from_row(cls, row: Row) -> OutboxMessage:
        return cls(
            id=row["id"],
            topic=row["topic"],
            run_id=str(row["run_id"]) if row["run_id"] else None,
            step=row["step"],
            queue=row["queue"],
            traceparent=row["traceparent"],
            payload=row["payload"],
        )


class Broker(Protocol):
    def publish(self, message: OutboxMessage) -> None: ...


def publish_outbox(db: Database, broker: Broker, ids: Sequence[int]) -> int:
    """Publish the given rows now (right after the commit that wrote them).

    A broker failure is logged, not raised: the rows stay unpublished and the sweep sends
    them, so the caller's request (already committed) still succeeds.
    """
    if not ids:
        return 0
    try:
        with db.transaction() as tx:
            # Locked and marked in one statement; a failed publish rolls the mark back.
            rows = tx.all("take_outbox_ids", ids=list(ids))
            for row in rows:
                broker.publish(OutboxMessage.from_row(row))
            return len(rows)
    except Exception:
        log.exception("publishing outbox rows %s failed; the sweep will retry them", list(ids))
        return 0


def sweep_outbox(db: Database, broker: Broker, *, grace_s: float, limit: int = 500) -> int:
    """Publish rows left unpublished for ``grace_s`` and parked rows that are now due."""
    with db.transaction() as tx:
        return _send(tx, broker, tx.all("lock_due_outbox", grace_s=grace_s, limit=limit))


def _send(tx: Session, broker: Broker, rows: list[Row]) -> int:
    for row in rows:
        broker.publish(OutboxMessage.from_row(row))
    if rows:
        tx.execute("mark_published", ids=[r["id"] for r in rows])
    return len(rows)
