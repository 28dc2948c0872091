"""Periodic jobs that fire at most once per interval, however many beats send them.

Two guards: a guarded UPDATE of ``periodic_job.last_started_at`` refuses a start less than
80 % of the interval after the previous one (a second beat, a rolling update), and a
session advisory lock refuses to overlap a run that is still going. Both are taken in one
statement, and the result is recorded with the lock's release in another: a tick costs two
round trips besides the job's own.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from psycopg.types.json import Jsonb

from docpipe.state.db import Database

__all__ = ["run_once_per_interval"]

log = logging.getLogger(__name__)

# Starts closer together than this share of the interval are a second beat's.
_MIN_GAP_SHARE = 0.8


def _lock_key(name: str) -> int:
    return int.from_bytes(
        hashlib.sha256(f"docpipe.periodic.{name}".encode()).digest()[:8], "big", signed=True
    )


def run_once_per_interval(
    db: Database, name: str, interval_s: float, job: Callable[[Database], Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """Run ``job`` unless this interval's run already happened; None when skipped. The job
    gets the database on the connection that holds the lock: it takes no other (see
    Database.pinned)."""
    key = _lock_key(name)
    with db.pinned() as pinned, pinned.session() as s:
        row = s.one(
            "start_periodic_job", name=name, lock_key=key, min_gap_s=interval_s * _MIN_GAP_SHARE
        )
        if row is None or not row["held"]:
            return None
        result: Mapping[str, Any] | None = None
        try:
            if row["runs"] is not None:
                result = job(pinned)
        finally:
            s.one(
                "finish_periodic_job",
                name=name,
                lock_key=key,
                result=None if result is None else Jsonb(dict(result)),
            )
        return result
