"""The transactional outbox: messages are written with the state change that wants them and
published after it commits; a sweep publishes what a crash left behind.

Publishing is at-least-once (a crash after sending but before marking sends again later);
consumers are idempotent, so a duplicate costs a no-op claim, never a second provider call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from psycopg.types.json import Jsonb

from docpipe.broker.messages import Broker, Message
from docpipe.broker.queues import LANE_QUEUES
from docpipe.state.db import Database, Session

__all__ = ["LANE_QUEUES_PARAM", "publish_outbox", "sweep_outbox"]

log = logging.getLogger(__name__)

# The queue of each lane, for the statements that write a step's message (``queues``).
LANE_QUEUES_PARAM = Jsonb(dict(LANE_QUEUES))


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
            messages = tx.all_as(Message, "take_outbox_ids", ids=list(ids))
            for message in messages:
                broker.publish(message)
            return len(messages)
    except Exception:
        log.exception("publishing outbox rows %s failed; the sweep will retry them", list(ids))
        return 0


def sweep_outbox(db: Database, broker: Broker, *, grace_s: float, limit: int = 500) -> int:
    """Publish rows left unpublished for ``grace_s`` and parked rows that are now due."""
    with db.transaction() as tx:
        messages = tx.all_as(Message, "lock_due_outbox", grace_s=grace_s, limit=limit)
        return _send(tx, broker, messages)


def _send(tx: Session, broker: Broker, messages: list[Message]) -> int:
    for message in messages:
        broker.publish(message)
    if messages:
        tx.execute("mark_published", ids=[m.id for m in messages])
    return len(messages)
