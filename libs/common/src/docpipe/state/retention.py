"""Retention: beat deletes old provider-call logs, published outbox rows, ended runs and
old documents.

Only finished business goes: calls of ended runs, outbox rows already published, runs that
ended (with their steps, calls, decisions and webhook deliveries) once no webhook is owed,
ended batches whose runs are gone, and documents no run refers to any more. Active runs,
runs that await a person (``needs_review``: a pause, not an end), their calls and their
documents, unpublished or parked messages and pending webhooks are never touched.

Hot tables stay unblocked: each batch of at most ``retention_batch_size`` rows is its own
short transaction that skips rows another transaction holds (``SKIP LOCKED``), gives up
after a short ``lock_timeout`` instead of queueing behind anyone, and is bounded by a
``statement_timeout``. A pass also stops at its time budget; the next pass continues.
"""

from __future__ import annotations

import logging
import time

import psycopg.errors

from docpipe.settings import Settings
from docpipe.state.db import Database

__all__ = ["prune_retention"]

log = logging.getLogger(__name__)

# Per batch: wait this long for a row or table lock at most, and run this long at most.
LOCK_TIMEOUT_MS = 500
STATEMENT_TIMEOUT_MS = 10_000


def prune_retention(db: Database, settings: Settings, *, time_budget_s: float) -> dict[str, int]:
    """Delete rows past their retention, batch by batch, until none is left or the time
    budget is spent; returns the rows deleted per table in this pass."""
    deadline = time.monotonic() + time_budget_s
    passes = (
        ("llm_call_log", "prune_call_log", settings.retention_call_log_days),
        ("outbox", "prune_outbox", settings.retention_outbox_days),
        ("pipeline_run", "prune_runs", settings.retention_runs_days),
        ("batch", "prune_batches", settings.retention_runs_days),
        # After the runs: a document goes once no run refers to it any more.
        ("document", "prune_documents", settings.retention_documents_days),
    )
    deleted: dict[str, int] = {}
    for table, query, days in passes:
        deleted[table] = 0
        if days > 0:  # 0 days: keep forever
            deleted[table] = _prune(db, query, days, settings.retention_batch_size, deadline)
    if any(deleted.values()):
        log.info("retention: deleted %s", deleted)
    return deleted


def _prune(db: Database, query: str, days: int, batch_size: int, deadline: float) -> int:
    total = 0
    while time.monotonic() < deadline:
        try:
            with db.transaction() as tx:
                tx.conn.execute(
                    "SELECT set_config('lock_timeout', %s, true),"
                    " set_config('statement_timeout', %s, true)",
                    (f"{LOCK_TIMEOUT_MS}ms", f"{STATEMENT_TIMEOUT_MS}ms"),
                )
                deleted = tx.execute(query, days=days, limit=batch_size)
        except (
            psycopg.errors.LockNotAvailable,
            psycopg.errors.QueryCanceled,
            psycopg.errors.ForeignKeyViolation,
        ) as exc:
            # Someone holds what we need: they go first, the next pass tries again. (A run
            # started on an old document just as its batch looked makes the foreign key
            # refuse that batch; the next pass sees the run and keeps the document.)
            log.info("retention: %s yielded (%s); the next pass continues", query, exc)
            break
        total += deleted
        if deleted < batch_size:
            break
    return total
