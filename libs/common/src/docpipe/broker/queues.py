"""The queues, by name, and what waits in them: lengths and the age of the oldest message.

Queue names live here only; SQL that writes an outbox row gets them as a parameter.

kombu's Redis transport LPUSHes messages and consumers BRPOP them, so the oldest waiting
message of a list is at index -1. Messages with a priority live in extra lists named
``<queue>\\x06\\x16<priority>``; counting a queue must include them.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import redis

from docpipe.statuses import Lane

__all__ = [
    "ENQUEUED_AT_HEADER",
    "LANE_QUEUES",
    "PERIODIC_QUEUE",
    "QUEUES",
    "RUN_ID_HEADER",
    "WEBHOOK_QUEUE",
    "QueueState",
    "purge_runs",
    "queue_state",
    "sent_before",
    "sub_lists",
]

# One queue per lane, each served by its own worker pool.
LANE_QUEUES = {Lane.INTERACTIVE: "llm_interactive", Lane.BATCH: "llm_batch"}
# Periodic maintenance has its own queue, served by every worker pool, so it never waits
# behind a long batch queue.
PERIODIC_QUEUE = "docpipe_periodic"
# Webhook deliveries have their own queue, served by every worker pool: a receiver that is
# slow to answer never holds the reaper or the outbox sweep back in the periodic queue.
WEBHOOK_QUEUE = "docpipe_webhooks"
QUEUES = (*LANE_QUEUES.values(), PERIODIC_QUEUE, WEBHOOK_QUEUE)

ENQUEUED_AT_HEADER = "docpipe_enqueued_at"
RUN_ID_HEADER = "docpipe_run_id"
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (3, 6, 9)


def sub_lists(queue: str) -> list[str]:
    return [queue, *(f"{queue}{_PRIORITY_SEP}{p}" for p in _PRIORITY_STEPS)]


class QueueState:
    def __init__(self, queue: str, length: int, oldest_enqueued_at: float | None) -> None:
        self.queue = queue
        self.length = length
        # Unix time the oldest waiting message was published; None when the queue is empty
        # or the message carries no timestamp (published by something else).
        self.oldest_enqueued_at = oldest_enqueued_at

    def lag_s(self, now: float | None = None) -> float:
        if self.oldest_enqueued_at is None:
            return 0.0
        return max(0.0, (now or time.time()) - self.oldest_enqueued_at)


def queue_state(client: redis.Redis, queue: str) -> QueueState:
    names = sub_lists(queue)
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.llen(name)
        for name in names:
            pipe.lindex(name, -1)
        replies = pipe.execute()
    lengths, tails = replies[: len(names)], replies[len(names) :]
    stamps = [s for s in (_enqueued_at(t) for t in tails if t is not None) if s is not None]
    return QueueState(queue, sum(int(n) for n in lengths), min(stamps) if stamps else None)


def sent_before(client: redis.Redis, queue: str, grace_s: float) -> datetime:
    """Messages sent to ``queue`` before this instant cannot still be waiting in it, since
    queues are FIFO and the oldest waiting message is younger (``grace_s``: clock skew)."""
    now = time.time()
    oldest = queue_state(client, queue).oldest_enqueued_at
    return datetime.fromtimestamp(now if oldest is None else min(now, oldest - grace_s), UTC)


def _enqueued_at(raw: bytes | str) -> float | None:
    value = _header(raw, ENQUEUED_AT_HEADER)
    return float(value) if isinstance(value, int | float) else None


def purge_runs(client: redis.Redis, queue: str, run_ids: set[str]) -> int:
    """Remove the waiting messages of these runs from ``queue``; returns how many.

    Messages a worker already took are not in the list: they finish as no-ops (their run
    has ended) and are acknowledged.
    """
    removed = 0
    for name in sub_lists(queue):
        for raw in client.lrange(name, 0, -1):
            if str(_header(raw, RUN_ID_HEADER)) in run_ids:
                # kombu's messages are JSON, so decoding and re-encoding keeps them exact.
                message = raw.decode() if isinstance(raw, bytes) else raw
                removed += int(client.lrem(name, 1, message))
    return removed


def _header(raw: bytes | str, name: str) -> object:
    try:
        return json.loads(raw)["headers"].get(name)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
