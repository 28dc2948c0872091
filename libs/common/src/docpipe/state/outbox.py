"""The transactional outbox: messages are written with the state change that wants them and
published after it commits; a sweep publishes what a crash left behind.

Two ways out after the commit:

- ``publish_outbox``: the rows by id, locked and marked published in one transaction with
  the publish (the API, beat's periodic work, webhooks);
- ``publish_written``: a step's next message (docpipe.state.runs.record_step_result) and
  admitted runs' first steps come back whole from the statement that wrote them and are
  published with no round trip to PostgreSQL; the claim of the step marks its row
  delivered (claim_step). Such a row still unmarked is swept only once it is older than the
  oldest message waiting in its queue (queues are FIFO, so it cannot be waiting any more)
  and has been out of it for the reaper's redrive grace: a worker may hold a message it
  took for a while before it claims the step (its pool processes busy or starting).

Publishing is at-least-once (a crash after sending but before marking sends again later);
consumers are idempotent, so a duplicate costs a no-op claim, never a second provider call.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from psycopg.types.json import Jsonb

from docpipe.broker.messages import Broker, Message
from docpipe.broker.queues import LANE_QUEUES, sent_before
from docpipe.state.db import Database, Session

__all__ = ["LANE_QUEUES_PARAM", "messages_of", "publish_outbox", "publish_written", "sweep_outbox"]

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
            return _take_and_publish(tx, broker, ids)
    except Exception:
        log.exception("publishing outbox rows %s failed; the sweep will retry them", list(ids))
        return 0


def messages_of(rows: Iterable[dict[str, Any]]) -> tuple[Message, ...]:
    """The messages a statement wrote and returned whole (its outbox rows as JSON objects)."""
    return tuple(Message(**row) for row in rows)


def publish_written(broker: Broker, messages: Sequence[Message]) -> int:
    """Publish step messages just committed, without a round trip to PostgreSQL: their rows
    are marked delivered by their claim, and the sweep sends one whose publish was lost.
    A broker failure is logged, not raised (as in ``publish_outbox``)."""
    for published, message in enumerate(messages):
        try:
            broker.publish(message)
        except Exception:
            log.exception(
                "publishing outbox rows %s failed; the sweep will retry them",
                [m.id for m in messages[published:]],
            )
            return published
    return len(messages)


def sweep_outbox(
    db: Database,
    broker: Broker,
    broker_redis: redis.Redis,
    *,
    grace_s: float,
    lost_after_s: float,
    limit: int = 500,
) -> int:
    """Publish rows left unpublished for ``grace_s`` and parked rows that are now due; a
    step's message published without marking (``publish_written``) only once it cannot be
    waiting in its queue any more and is ``lost_after_s`` old (redrive_grace_s: it may be in
    a worker's hands, not yet claimed)."""
    try:
        cutoffs = {
            q: sent_before(broker_redis, q, grace_s).isoformat() for q in LANE_QUEUES.values()
        }
    except redis.RedisError:
        cutoffs = {}  # what waits cannot be told from what was lost: look next time
    with db.transaction() as tx:
        due = tx.all(
            "lock_due_outbox",
            grace_s=grace_s,
            limit=limit,
            lost_after_s=lost_after_s,
            cutoffs=Jsonb(cutoffs),
        )
        return _take_and_publish(tx, broker, [row["id"] for row in due])


def _take_and_publish(tx: Session, broker: Broker, ids: Sequence[int]) -> int:
    """Publish the rows ``ids`` (those still unpublished and due), marked published in the
    statement that takes them: a failed publish rolls the mark back with ``tx``."""
    if not ids:
        return 0
    messages = tx.all_as(Message, "take_outbox_ids", ids=list(ids))
    for message in messages:
        broker.publish(message)
    return len(messages)
