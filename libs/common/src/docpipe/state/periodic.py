"""Periodic jobs that fire at most once per interval, however many beats send them.

Two guards: a guarded UPDATE of ``periodic_job.last_started_at`` refuses a start less than
80 % of the interval after the previous one (a second beat, a rolling update), and a
session advisory lock refuses to overlap a run that is still going.
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
    db: Database, name: str, interval_s: float, job: Callable[[], Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """Run ``job`` unless this interval's run already happened; None when skipped."""
    with db.session() as s:
        row = s.conn.execute("SELECT pg_try_advisory_lock(%s) AS locked", (_lock_key(name),))
        if not (locked := row.fetchone()) or not locked["locked"]:
            return None
        try:
            if (
                s.one("start_periodic_job", name=name, min_gap_s=interval_s * _MIN_GAP_SHARE)
                is None
            ):
                return None
            result = job()
            s.execute("finish_periodic_job", name=name, result=Jsonb(dict(result)))
            return result
        finally:
            s.conn.execute("SELECT pg_advisory_unlock(%s)", (_lock_key(name),))
