"""Retention: beat deletes old provider-call logs, published outbox rows, ended runs and
old documents.

The call log is partitioned by week: a week's partition goes whole once all of it is older
than the retention (the calls of runs not yet ended are kept, in the default partition),
and each pass makes the partitions of the weeks ahead. Rows in the default partition (a
week that had no partition, calls kept) go one by one like the other tables'.

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
from collections import Counter
from typing import Any

import psycopg.errors

from docpipe.settings import Settings
from docpipe.state.db import Database, Session

__all__ = ["expire_reviews", "prune_retention"]

log = logging.getLogger(__name__)

# Per batch: wait this long for a row or table lock at most, and run this long at most.
LOCK_TIMEOUT_MS = 500
STATEMENT_TIMEOUT_MS = 10_000
# Weekly call log partitions made ahead of time: a beat that stops for this long leaves the
# weeks after in the default partition, nothing worse.
CALL_LOG_WEEKS_AHEAD = 2


def prune_retention(db: Database, settings: Settings, *, time_budget_s: float) -> dict[str, int]:
    """Delete rows past their retention, batch by batch, until none is left or the time
    budget is spent; returns the rows deleted per table in this pass, and the call log
    partitions dropped whole (``llm_call_log_partitions``)."""
    deadline = time.monotonic() + time_budget_s
    deleted: Counter[str] = Counter({"llm_call_log_partitions": 0})
    deleted.update(_keep_call_log_partitions(db, settings.retention_call_log_days, deadline))
    passes: tuple[tuple[str, str, int, dict[str, Any]], ...] = (
        ("llm_call_log", "prune_call_log", settings.retention_call_log_days, {}),
        ("outbox", "prune_outbox", settings.retention_outbox_days, {}),
        # A document goes with its last run (once it is past its own retention).
        (
            "pipeline_run",
            "prune_runs",
            settings.retention_runs_days,
            {"document_days": settings.retention_documents_days},
        ),
        ("batch", "prune_batches", settings.retention_runs_days, {}),
        # Documents no run used, or whose last run went before they were old enough.
        ("document", "prune_documents", settings.retention_documents_days, {}),
        # The web pages' sessions, a day after they expired.
        ("web_session", "prune_web_sessions", 1, {}),
        # The answer reuse cache, as old as the calls it names (gone, or going by the week).
        ("answered_request", "prune_answered_requests", settings.retention_call_log_days, {}),
    )
    deleted.update({table: 0 for table, *_ in passes})
    for table, query, days, params in passes:
        if days > 0:  # 0 days: keep forever
            batch = settings.retention_batch_size
            deleted.update(_prune(db, table, query, days, params, batch, deadline))
    if any(deleted.values()):
        log.info("retention: deleted %s", dict(deleted))
    return dict(deleted)


def expire_reviews(db: Database, settings: Settings) -> Counter[str]:
    """End the runs that have awaited a person longer than DOCPIPE_REVIEW_EXPIRE_AFTER_S as
    ``expired`` (none when it is 0), a batch at a time; returns how many per pipeline. Their
    webhooks follow from beat's notification pass."""
    expired: Counter[str] = Counter()
    if settings.review_expire_after_s <= 0:
        return expired
    while True:
        with db.transaction() as tx:
            _bound(tx)
            rows = tx.all(
                "expire_reviews",
                after_s=settings.review_expire_after_s,
                limit=settings.retention_batch_size,
            )
        expired.update(row["pipeline"] for row in rows)
        if len(rows) < settings.retention_batch_size:
            break
    if expired:
        log.info("retention: reviews expired: %s", dict(expired))
    return expired


def _keep_call_log_partitions(db: Database, days: int, deadline: float) -> Counter[str]:
    """Make the weeks ahead's partitions, then drop those past the retention (0 days: none),
    each in a transaction of its own; returns how many partitions were dropped."""
    dropped: Counter[str] = Counter()
    try:
        with db.transaction() as tx:
            _bound(tx)
            row = tx.one("add_call_log_partitions", weeks=CALL_LOG_WEEKS_AHEAD)
        if row and row["made"]:
            log.info("retention: made %s call log partitions", row["made"])
        while days > 0 and time.monotonic() < deadline:
            with db.transaction() as tx:
                _bound(tx)
                gone = tx.one("drop_call_log_partition", days=days)
            if gone is None:
                break
            log.info(
                "retention: dropped %s, kept the %s calls of runs not ended",
                gone["dropped"],
                gone["kept"],
            )
            dropped["llm_call_log_partitions"] += 1
    except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
        # A partition is attached or detached under a brief lock of the whole call log:
        # whoever holds it goes first, the next pass tries again.
        log.info("retention: call log partitions yielded (%s); the next pass continues", exc)
    return dropped


def _bound(tx: Session) -> None:
    tx.conn.execute(
        "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)",
        (f"{LOCK_TIMEOUT_MS}ms", f"{STATEMENT_TIMEOUT_MS}ms"),
    )


def _prune(
    db: Database,
    table: str,
    query: str,
    days: int,
    params: dict[str, Any],
    batch_size: int,
    deadline: float,
) -> Counter[str]:
    total: Counter[str] = Counter()
    while time.monotonic() < deadline:
        try:
            with db.transaction() as tx:
                _bound(tx)
                rows = tx.all(query, days=days, limit=batch_size, **params)
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
        kinds = Counter(row["kind"] for row in rows)
        total.update(kinds)
        if kinds[table] < batch_size:  # the table it pages through has no more
            break
    return total
