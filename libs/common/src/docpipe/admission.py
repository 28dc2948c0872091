"""Admission of batch runs: they wait in PostgreSQL and enter the ``llm_batch`` queue only
as runs in flight finish, at most ``batch_admission_window`` at a time.

So the Redis queue never holds more than the window, a cancel has almost nothing to take
back, and the order of admission — least served tenant first, then least served batch —
decides fairness instead of the queue's FIFO.
"""

from __future__ import annotations

from docpipe.db import Database
from docpipe.settings import Settings

__all__ = ["ADMISSION_LOCK_KEY", "admit_batch_runs"]

# Admissions by beat and by workers (when a batch run ends) must not overlap, or both would
# fill the same free slots.
ADMISSION_LOCK_KEY = 0x646F6370_61646D74


def admit_batch_runs(db: Database, settings: Settings) -> tuple[int, ...]:
    """Fill the free slots of the window; returns the outbox ids to publish (empty when
    another process is admitting right now)."""
    with db.transaction() as tx:
        row = tx.conn.execute(
            "SELECT pg_try_advisory_xact_lock(%s) AS locked", (ADMISSION_LOCK_KEY,)
        ).fetchone()
        if not row or not row["locked"]:
            return ()
        rows = tx.all(
            "admit_batch_runs",
            window=settings.batch_admission_window,
            memory_s=settings.batch_fairness_memory_s,
        )
    return tuple(r["id"] for r in rows)
