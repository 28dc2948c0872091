"""Admission of batch runs: they wait in PostgreSQL and enter the ``llm_batch`` queue only
while fewer than ``batch_admission_window`` are in flight: when they are stored (the API),
when a run in flight ends (its worker) and at beat's tick.

So the Redis queue never holds more than the window, a cancel has almost nothing to take
back, and the order of admission — least served tenant first, then least served batch —
decides fairness instead of the queue's FIFO.
"""

from __future__ import annotations

from docpipe.broker.messages import Broker, Message
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.outbox import LANE_QUEUES_PARAM, messages_of, publish_written

__all__ = ["admit_and_publish", "admit_batch_runs"]

# Admissions by the API, by workers and by beat take turns, or two would fill the same
# free slots. Waiting for the turn (milliseconds) instead of skipping it matters:
# the admission in progress may not see the slot that just freed, which would then stay
# empty until beat's next tick.
_ADMISSION_LOCK_KEY = 0x646F6370_61646D74


def admit_batch_runs(db: Database, settings: Settings) -> tuple[Message, ...]:
    """Fill the free slots of the window; returns the admitted runs' first messages, to
    publish after the commit (publish_written)."""
    with db.transaction() as tx:
        tx.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_ADMISSION_LOCK_KEY,))
        rows = tx.all(
            "admit_batch_runs",
            window=settings.batch_admission_window,
            memory_s=settings.batch_fairness_memory_s,
            queues=LANE_QUEUES_PARAM,
        )
    return messages_of(rows)


def admit_and_publish(db: Database, broker: Broker, settings: Settings) -> int:
    """Fill the free slots and publish the admitted runs' first steps (a failed publish is
    swept later); returns how many runs were admitted."""
    admitted = admit_batch_runs(db, settings)
    publish_written(broker, admitted)
    return len(admitted)
