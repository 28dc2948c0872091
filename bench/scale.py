"""What grows with history: every named query timed on databases of 100,000 and 1,000,000 runs.

Each size is a throwaway PostgreSQL filled through docpipe's migrations with a busy
deployment's history (bench.busy: a steady 11,000 runs a day, so 1,000,000 runs are 91 days;
what is in flight is the same at every size), its calls kept for the call log's default
retention, as beat's retention keeps them (the weeks before are dropped whole). On each:

- every named query (docpipe.state.query_paths: periodic, lists, keyed) is run as a
  prepared statement would run it, with a custom plan and with the generic plan, ``--repeat``
  times after a warm-up, each inside a transaction rolled back (an admission, a retention
  batch leave the database as they found it); admission is timed with free slots;
- a metrics scrape's PostgreSQL part (beat's state collector, as Prometheus calls it);
- bytes per run, table by table, and, on the schema before issue 36 (migrations up to
  BEFORE), the same at the smallest size;
- retention: the oldest fifth of the runs and half of the call log's kept weeks made prunable,
  rows (and partitions) removed per second by beat's passes.

The report (docs/benchmarks/scale.md) gives each query's median at each size, the ratio of
the largest size's to the smallest's, the plan at the largest size and, for each query above
2x, its plan note (PLAN_NOTES): why it grew, found with EXPLAIN (ANALYZE, BUFFERS).

Each statement's runs are rolled back, and the tables it changed are then VACUUMed, so that
its rolled-back row versions are not read by the statements timed after it.

    python -m bench.scale [--sizes 100000,1000000] [--repeat 5]
    python -m bench.scale --from-raw   # the report again from docs/benchmarks/scale-raw.json

A 10,000,000-run fill needs about 80 GB (with every call kept, 170 GB); `--sizes` takes it
where the disk allows.

The report checks the issue's targets: every periodic and list query within 2x of its
smallest size's time (of those taking a millisecond or more) and work, admission with free
slots under 20 ms and a metrics scrape under 50 ms at the largest size.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.busy import Filled, Shape, busy_database_server, fill
from bench.harness import REPORTS, write_report
from bench.live_migration import migrations_up_to
from bench.query_plans import MODES, QueryLab, median, plan_note, written
from docpipe.settings import Settings
from docpipe.settings.retention import RetentionSettings
from docpipe.state.db import Database, Timeouts, load_queries
from docpipe.state.migrate import apply_migrations
from docpipe.state.query_paths import CUSTOM_PLAN, KEYED, LISTS, PERIODIC
from docpipe.state.retention import prune_retention
from docpipe.worker.state_collector import StateCollector

BEFORE = "0065"  # the last migration before issue 36's
RUN_TABLES = (
    "pipeline_run",
    "pipeline_step_result",
    "review_decision",
    "webhook_delivery",
    "batch",
)
HISTORY_TABLES = (*RUN_TABLES, "llm_call_log", "outbox")
DOCUMENT_TABLES = ("document", "document_page", "document_page_image", "document_original_chunk")
# Admission with free slots: the fill's window is full (64 in flight).
VALUES = {"admit_batch_runs": {"window": 72}}
# Issue 36's targets, checked by the report.
TARGET_RATIO = 2.0  # largest size over smallest, periodic and list queries
TARGET_ADMISSION_MS = 20.0
TARGET_SCRAPE_MS = 50.0
EXAMPLE_PER_DAY = 300_000  # docs/capacity.md's deployment, documents (runs) a day
SHAPE_DOCUMENT_BYTES = Shape(runs=0).document_bytes
_ONE_BATCH = (
    "not history: one batch by its primary key; 1 buffer at 100,000 runs (a one-page table"
    " read whole), 3 at 1,000,000 (the index and the row): the depth of a B-tree, which grows"
    " with the logarithm of the batches."
)
# Why a query's time or work grew from the smallest size to the largest, found with EXPLAIN
# (ANALYZE, BUFFERS) on fills of 100,000 and 1,000,000 runs (2026-12-05), and what was done:
# the report prints the note of each query above 2x. Buffers are those of the 1,000,000-run
# fill, before and after the change.
PLAN_NOTES = {
    "cancel_pending_steps": "history, fixed: the planner ANDed a bitmap of every pending step"
    " (pipeline_step_result_pending_idx, a failed run's later steps among them: 70,000 entries"
    " at 1,000,000 runs) with the primary key's 80 rows, 18.7 ms and 150 buffers. No query read"
    " that index by its key; migration 0089 drops it: the primary key alone, 0.27 ms, 86.",
    "redrive_lost_steps": "history, fixed: the same bitmap of every pending step ANDed with"
    " the primary key's rows of the runs in flight, 33 ms of its 41 at 1,000,000 runs (CPU on"
    " 70,000 entries, hence the time without the buffers). Migration 0089 drops the index:"
    " 1.6 ms, 679 buffers before, 597 after.",
    "renew_leases": "query shape, fixed: once the statistics' sample held no running step the"
    " planner took 'running' for one row and read every running step of every worker (the"
    " 94 in flight, 92 buffers) to find the held ones (4 buffers at 100,000 runs). The held"
    " runs are now an index condition too: 20 buffers, one probe per held key, at both sizes.",
    "run_counts": "fill artefact, fixed: the fill's VACUUM ran while an autovacuum ANALYZE held"
    " a snapshot, so the newest pages of pipeline_run (the runs in flight) were not marked"
    " all-visible and the index-only scan read the heap for each of their rows: 117 buffers"
    " and 1,059 heap fetches on a 100,000-run fill, 52 and none on a 1,000,000-run fill"
    " (which size it hits is chance). The fill now VACUUMs until every page is all-visible.",
    "queue_run_webhooks": "bench artefact, fixed: the statements timed before it were rolled"
    " back, but their row versions stayed in the indexes until a VACUUM (expire_reviews'"
    " updates of the reviews past their age, more of them in a longer history, left entries"
    " in pipeline_run_unnotified_idx): 3 buffers on a fresh 1,000,000-run fill, 8 to 13 after"
    " expire_reviews, 3 after VACUUM (INDEX_CLEANUP ON). The bench now VACUUMs the tables"
    " each timed statement changed.",
    "queue_batch_webhooks": "history, fixed: the planner took the owed webhook's three"
    " conditions for independent, expected a fifth of the batches, and the UPDATE read the"
    " batch table whole (one row per batch: 1 page at 100,000 runs, 10 at 1,000,000). The"
    " batches owed a webhook are now picked from batch_webhook_owed_idx and changed by their"
    " keys: 1 buffer at both sizes.",
    "batch_status": _ONE_BATCH,
    "end_stopped_batch": _ONE_BATCH,
    "stop_batch_runs": _ONE_BATCH,
    "abandon_orphaned_steps": "not history: it reads every running step (94, the work in"
    " flight, the same at both sizes): at 100,000 runs as a bitmap, each of their 51 heap"
    " pages once; at 1,000,000, where the statistics' sample holds no running step, in the"
    " partial index's key order, a heap page per step (92). It grows with the steps in"
    " flight only.",
    "reap_lost_leases": "not history: like abandon_orphaned_steps, every running step (94),"
    " read as a bitmap at 100,000 runs (51 heap pages) and in key order at 1,000,000 (92).",
}
# Queries whose work grew past 2x with what is in flight or with a B-tree's depth, not with
# history: the work target counts them as met, and the report lists them with their notes.
NOT_HISTORY = frozenset(name for name, note in PLAN_NOTES.items() if note.startswith("not history"))


def scale_shape(runs: int) -> Shape:
    """The fill of ``runs`` runs: calls kept for the call log's default retention, as beat's
    retention keeps them (a fill keeping every call would hold weeks no deployment holds, and
    time the reads of a run's calls against them)."""
    return Shape(runs=runs, call_log_days=RetentionSettings().retention_call_log_days)


@dataclass
class QueryTiming:
    name: str
    mode: str
    ms: float  # the fastest of the runs: the least disturbed by the machine's other load
    median_ms: float
    buffers: int  # shared buffers the statement touched (hit or read): its work
    plan: str
    error: str | None = None


@dataclass
class SizeResult:
    runs: int
    history_days: float
    fill_s: float
    bytes: dict[str, int]  # table -> bytes (llm_call_log: every partition)
    rows: dict[str, int]
    queries: list[QueryTiming] = field(default_factory=list)
    scrape_ms: tuple[float, float] = (0.0, 0.0)
    pruned: dict[str, Any] = field(default_factory=dict)
    # The machine's load average (1 and 5 minutes) as the queries' timing ended.
    load: tuple[float, float] | None = None
    call_log_partitions: int = 0  # the weekly ones holding calls, as the queries were timed


def table_bytes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Each table's bytes with its indexes and TOAST; a partitioned table's, all partitions'."""
    found = {}
    for table in (*HISTORY_TABLES, *DOCUMENT_TABLES):
        row = conn.execute(
            b"SELECT CASE WHEN c.relkind = 'p'"
            b" THEN (SELECT sum(pg_total_relation_size(t.relid)) FROM pg_partition_tree(c.oid) t)"
            b" ELSE pg_total_relation_size(c.oid) END"
            b" FROM pg_class c WHERE c.oid = %s::regclass",
            (table,),
        ).fetchone()
        found[table] = int(row[0]) if row else 0
    return found


def time_queries(url: str, repeat: int) -> list[QueryTiming]:
    timings = []
    # Connected as docpipe's connections are (their session settings: no JIT, ...).
    session = Timeouts.of(Settings(database_url=url)).connection_kwargs(url)
    with psycopg.connect(url, autocommit=True, **session) as conn:
        conn.execute(b"SET statement_timeout = '120s'")
        lab = QueryLab(conn, load_queries())
        for name in sorted(PERIODIC | LISTS | KEYED):
            for mode in MODES:
                if mode == "generic" and name in CUSTOM_PLAN:
                    continue
                try:
                    ms, plan = lab.time(name, mode, repeat=repeat, values=VALUES.get(name))
                except psycopg.Error as exc:
                    error = str(exc).splitlines()[0]
                    nan = float("nan")
                    timings.append(QueryTiming(name, mode, nan, nan, 0, "", error))
                    continue
                buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
                timings.append(
                    QueryTiming(name, mode, min(ms), median(ms), buffers, plan_note(plan))
                )
                _vacuum_written(conn, plan)
    return timings


def _vacuum_written(conn: psycopg.Connection[Any], plan: Mapping[str, Any]) -> None:
    """VACUUM the tables a timed statement changed. Each run of it was rolled back, but its
    row versions and index entries stay until a VACUUM: the statements timed after it would
    read them (expire_reviews' rolled-back updates of the reviews past their age left their
    versions in pipeline_run_unnotified_idx, and queue_run_webhooks, timed next, read 9
    buffers instead of 3 at 1,000,000 runs; more after mark_evaluation_runs' 10,000 rows).
    A deployment commits what it changes, and autovacuum clears what it leaves. INDEX_CLEANUP
    ON: with dead rows on a few pages only, a VACUUM leaves their index entries otherwise."""
    tables = written(plan)
    if tables:
        conn.execute(f"VACUUM (INDEX_CLEANUP ON) {', '.join(sorted(tables))}".encode())


def time_scrape(url: str, repeat: int) -> tuple[float, float]:
    """Milliseconds (fastest, median) of the PostgreSQL part of a scrape, as beat's
    collector makes it."""
    collector = StateCollector(Settings(database_url=url), min_interval_s=0)
    try:
        collector._read_postgres()  # connect and warm up
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            collector._read_postgres()
            timings.append(1000 * (time.perf_counter() - started))
    finally:
        collector.close()
    return min(timings), median(timings)


def prune_rate(url: str, filled: Filled) -> dict[str, Any]:
    """Rows removed per second by beat's retention passes, with the oldest fifth of the runs
    and half of the call log's kept weeks past their retention."""
    days = max(1, int(filled.history_days * 0.8))
    call_days = min(filled.history_days, filled.shape.call_log_days or filled.history_days)
    settings = Settings(
        database_url=url,
        retention_runs_days=days,
        retention_documents_days=days,
        retention_call_log_days=max(1, int(call_days * 0.5)),
        retention_outbox_days=7,
    )
    db = Database(url, max_size=2)
    with psycopg.connect(url, autocommit=True) as conn:
        calls_before = _count(conn, "llm_call_log")
        runs_before = _count(conn, "pipeline_run")
    deleted: dict[str, int] = {}
    started = time.monotonic()
    try:
        while time.monotonic() - started < 900:
            this = prune_retention(db, settings, time_budget_s=30)
            for table, n in this.items():
                deleted[table] = deleted.get(table, 0) + n
            if not any(this.values()):
                break
    finally:
        db.close()
    elapsed = time.monotonic() - started
    with psycopg.connect(url, autocommit=True) as conn:
        calls_gone = calls_before - _count(conn, "llm_call_log")
        runs_gone = runs_before - _count(conn, "pipeline_run")
    return {
        "seconds": elapsed,
        "deleted": deleted,
        "calls_gone": calls_gone,
        "runs_gone": runs_gone,
        "runs_per_s": runs_gone / elapsed if elapsed else 0.0,
        "documents_per_s": deleted.get("document", 0) / elapsed if elapsed else 0.0,
        "runs_days": days,
        "call_log_days": settings.retention_call_log_days,
    }


def _weeks_holding_calls(conn: psycopg.Connection[Any]) -> int:
    """The call log's weekly partitions that hold a call (not the weeks ahead, empty)."""
    names = [
        r[0]
        for r in conn.execute(
            b"SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            b" WHERE i.inhparent = 'llm_call_log'::regclass AND c.relname ~ '^llm_call_log_p[0-9]'"
        )
    ]
    return sum(
        1
        for name in names
        if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {name})".encode()).fetchone() == (True,)
    )


def _count(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(f"SELECT count(*) FROM {table}".encode()).fetchone()
    return int(row[0]) if row else 0


@contextmanager
def filled_database(runs: int, *, before: bool) -> Iterator[tuple[str, Filled]]:
    with busy_database_server() as server:
        url = server.create_database("docpipe_scale")
        with tempfile.TemporaryDirectory() as old:
            folder = migrations_up_to(BEFORE, Path(old)) if before else None
            apply_migrations(url, folder=folder)
        print(f"filling {runs:,} runs ({'before' if before else 'now'})", flush=True)
        yield url, fill(url, scale_shape(runs), progress=True)


def measure(runs: int, repeat: int) -> SizeResult:
    with filled_database(runs, before=False) as (url, filled):
        with psycopg.connect(url, autocommit=True) as conn:
            sizes = table_bytes(conn)
            weeks = _weeks_holding_calls(conn)
        result = SizeResult(runs, filled.history_days, filled.seconds, sizes, filled.rows)
        result.call_log_partitions = weeks
        print("timing the named queries", flush=True)
        result.queries = time_queries(url, repeat)
        result.scrape_ms = time_scrape(url, repeat)
        result.load = os.getloadavg()[:2]
        print("pruning", flush=True)
        result.pruned = prune_rate(url, filled)
    return result


def bytes_before(runs: int) -> dict[str, int]:
    with filled_database(runs, before=True) as (url, _), psycopg.connect(url) as conn:
        return table_bytes(conn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--from-raw",
        action="store_true",
        help="measure nothing: write the report again from docs/benchmarks/scale-raw.json",
    )
    args = parser.parse_args()
    measured = None
    if args.from_raw:
        results, before, args.repeat, measured = _load()
        args.sizes = ",".join(str(r.runs) for r in results)
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
        results = []
        for runs in sizes:
            results.append(measure(runs, args.repeat))
            _save(results, None, args.repeat)
        before = bytes_before(sizes[0])
        _save(results, before, args.repeat)
    write_report(
        "scale", report(results, before, args), figures(results, before), measured=measured
    )


RAW = REPORTS / "scale-raw.json"


def _save(results: list[SizeResult], before: Mapping[str, int] | None, repeat: int) -> None:
    """The raw figures so far (a long run keeps what it measured if stopped)."""
    raw = {"sizes": [r.__dict__ | {"queries": [q.__dict__ for q in r.queries]} for r in results]}
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RAW.write_text(
        json.dumps(
            raw | {"before": before, "repeat": repeat, "measured": stamp}, indent=1, default=str
        )
        + "\n"
    )


def _load() -> tuple[list[SizeResult], dict[str, int], int, str | None]:
    """What a run saved: each size's results, the bytes before, the repeats, when."""
    raw = json.loads(RAW.read_text(encoding="utf-8"))
    if not raw.get("before"):
        raise SystemExit(f"{RAW.name} holds no bytes before: that run stopped before the end")
    results = []
    for size in raw["sizes"]:
        queries = [QueryTiming(**q) for q in size.pop("queries")]
        scrape = tuple(size.pop("scrape_ms"))
        load = size.pop("load", None)
        results.append(
            SizeResult(
                **size,
                queries=queries,
                scrape_ms=(scrape[0], scrape[1]),
                load=(load[0], load[1]) if load else None,
            )
        )
    return results, raw["before"], int(raw.get("repeat", 5)), raw.get("measured")


def per_run(result: SizeResult, tables: tuple[str, ...]) -> float:
    return sum(result.bytes[t] for t in tables) / result.runs


def retained_per_run(bytes_: Mapping[str, int], runs: int, *, weeks: bool) -> float:
    """Bytes per run a deployment holds within the default retention, at a steady rate: every
    run's rows for its RETENTION_RUNS_DAYS, its calls for RETENTION_CALL_LOG_DAYS (and, since
    the call log drops whole weeks, half a week more on average), its outbox rows for
    RETENTION_OUTBOX_DAYS."""
    d = RetentionSettings()
    call_days = d.retention_call_log_days + (3.5 if weeks else 0.0)
    kept = {
        "llm_call_log": min(1.0, call_days / d.retention_runs_days),
        "outbox": min(1.0, d.retention_outbox_days / d.retention_runs_days),
    }
    return sum(bytes_[t] * kept.get(t, 1.0) for t in HISTORY_TABLES) / runs


def _rows_pruned(pruned: Mapping[str, Any]) -> int:
    """Rows removed: those deleted row by row, and the calls of the partitions dropped."""
    deleted = pruned.get("deleted", {})
    by_row = sum(
        n for t, n in deleted.items() if t not in ("llm_call_log", "llm_call_log_partitions")
    )
    return int(by_row) + int(pruned.get("calls_gone", 0))


def _worst(ratios: Mapping[tuple[str, str], float]) -> tuple[float, str]:
    """The largest ratio of the periodic and list queries, and whose it is."""
    found = {k: v for k, v in ratios.items() if _path(k[0]) != "keyed"}
    if not found:
        return float("nan"), "none"
    (name, mode), ratio = max(found.items(), key=lambda kv: kv[1])
    return ratio, f"{name} ({mode})"


def _over_target(ratios: Mapping[tuple[str, str], float]) -> list[str]:
    return sorted(
        f"{n} ({m})" for (n, m), v in ratios.items() if v > TARGET_RATIO and _path(n) != "keyed"
    )


def figures(results: list[SizeResult], before: Mapping[str, int]) -> dict[str, Any]:
    small, large = results[0], results[-1]
    by_time, by_work = _ratios(small, large, "ms"), _ratios(small, large, "buffers")
    worst_time, worst_time_query = _worst(by_time)
    worst_work, worst_work_query = _worst(by_work)
    pruned = large.pruned
    seconds = pruned.get("seconds") or float("nan")
    return {
        "sizes": [r.runs for r in results],
        "runs_small": small.runs,
        "runs_large": large.runs,
        "admission_free_slots_ms": _ms(large, "admit_batch_runs"),
        "admission_free_slots_ms_small": _ms(small, "admit_batch_runs"),
        "metrics_scrape_ms": large.scrape_ms[0],
        "metrics_scrape_median_ms": large.scrape_ms[1],
        "metrics_scrape_ms_small": small.scrape_ms[0],
        # Every named query, keyed lookups included.
        "worst_buffers_ratio": max(by_work.values()),
        "worst_time_ratio": max(by_time.values()),
        # The target: periodic and list queries.
        "periodic_list_worst_time_ratio": worst_time,
        "periodic_list_worst_time_query": worst_time_query,
        "periodic_list_worst_work_ratio": worst_work,
        "periodic_list_worst_work_query": worst_work_query,
        "periodic_list_over_2x_time": _over_target(by_time),
        "periodic_list_over_2x_work": _over_target(by_work),
        "periodic_list_over_2x_work_with_history": _over_target(
            {k: v for k, v in by_work.items() if k[0] not in NOT_HISTORY}
        ),
        # The call log's weekly partitions holding calls, and the load average over a
        # minute as the queries' timing ended, at the smallest and the largest size.
        "call_log_weeks_small": small.call_log_partitions,
        "call_log_weeks_large": large.call_log_partitions,
        # Admission's work, the same at both sizes when its time is not (the machine's load).
        "admission_buffers_small": _buffers(small, "admit_batch_runs"),
        "admission_buffers_large": _buffers(large, "admit_batch_runs"),
        "load_small": small.load[0] if small.load else float("nan"),
        "load_large": large.load[0] if large.load else float("nan"),
        "bytes_per_run": per_run(large, HISTORY_TABLES),
        "bytes_per_run_before": sum(before[t] for t in HISTORY_TABLES) / small.runs,
        "bytes_per_run_small": per_run(small, HISTORY_TABLES),
        "bytes_per_run_retained": retained_per_run(small.bytes, small.runs, weeks=True),
        "bytes_per_run_retained_before": retained_per_run(before, small.runs, weeks=False),
        "call_log_bytes_per_run": small.bytes["llm_call_log"] / small.runs,
        "call_log_bytes_per_run_before": before["llm_call_log"] / small.runs,
        "call_log_share_before": before["llm_call_log"] / sum(before[t] for t in HISTORY_TABLES),
        "document_bytes_per_run": per_run(large, DOCUMENT_TABLES),
        "runs_pruned_per_s": pruned.get("runs_per_s"),
        "documents_pruned_per_s": pruned.get("documents_per_s"),
        "calls_pruned_per_s": pruned.get("calls_gone", 0) / seconds,
        "rows_pruned_per_s": _rows_pruned(pruned) / seconds,
        "call_log_partitions_dropped": pruned.get("deleted", {}).get("llm_call_log_partitions", 0),
        "runs_pruned": pruned.get("runs_gone"),
        "calls_pruned": pruned.get("calls_gone"),
        "prune_seconds": pruned.get("seconds"),
        # docs/capacity.md's example: 300,000 documents a day, the default retention.
        "held_runs_at_300000_a_day": EXAMPLE_PER_DAY * RetentionSettings().retention_runs_days,
        "held_gb_at_300000_a_day": EXAMPLE_PER_DAY
        * RetentionSettings().retention_runs_days
        * retained_per_run(small.bytes, small.runs, weeks=True)
        / 1e9,
        "held_gb_at_300000_a_day_before": EXAMPLE_PER_DAY
        * RetentionSettings().retention_runs_days
        * retained_per_run(before, small.runs, weeks=False)
        / 1e9,
        "retention_s_a_day_at_300000": EXAMPLE_PER_DAY / (pruned.get("runs_per_s") or float("nan")),
    }


def _ms(result: SizeResult, name: str, mode: str | None = None) -> float:
    """The slower of a query's modes (or ``mode``'s), fastest run, in ms."""
    found = [q.ms for q in result.queries if q.name == name and (mode is None or q.mode == mode)]
    return max(found) if found else float("nan")


def _buffers(result: SizeResult, name: str) -> int:
    """The most buffers a query touched in either of its modes."""
    return max((q.buffers for q in result.queries if q.name == name), default=0)


# Below this a time is the machine's noise as much as the query's: its ratio says little.
NOISE_MS = 1.0


def _ratios(small: SizeResult, large: SizeResult, what: str) -> dict[tuple[str, str], float]:
    """Each query's figure at the largest size over its figure at the smallest: ``ms`` (the
    fastest runs; a query fast at both sizes is left out) or ``buffers`` (its work)."""
    base = {(q.name, q.mode): q for q in small.queries if q.error is None}
    ratios = {}
    for q in large.queries:
        b = base.get((q.name, q.mode))
        if b is None or q.error is not None:
            continue
        if what == "ms" and max(q.ms, b.ms) >= NOISE_MS:
            ratios[q.name, q.mode] = q.ms / b.ms
        elif what == "buffers" and b.buffers:
            ratios[q.name, q.mode] = q.buffers / b.buffers
    return ratios


def _path(name: str) -> str:
    return "periodic" if name in PERIODIC else "list" if name in LISTS else "keyed"


def _over(ratios: Mapping[tuple[str, str], float]) -> str:
    over = sorted((k for k, v in ratios.items() if v > 2), key=lambda k: -ratios[k])
    return ", ".join(f"`{n}` ({m}, {ratios[n, m]:.1f})" for n, m in over) or "none"


_WEEK = re.compile(r"llm_call_log_p\d{8}")


def weeks_read(plan: str) -> int:
    """How many of the call log's weekly partitions a plan note reads."""
    return len(set(_WEEK.findall(plan)))


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def report(results: list[SizeResult], before: Mapping[str, int], args: argparse.Namespace) -> str:
    small, large = results[0], results[-1]
    by_time, by_work = _ratios(small, large, "ms"), _ratios(small, large, "buffers")
    f = figures(results, before)
    defaults = RetentionSettings()
    by_query: dict[tuple[str, str], list[QueryTiming]] = {}
    for r in results:
        for q in r.queries:
            by_query.setdefault((q.name, q.mode), []).append(q)
    head = " | ".join(f"{r.runs:,}: ms (median) / buffers" for r in results)
    rows = []
    for (name, mode), timings in sorted(by_query.items(), key=lambda kv: (_path(kv[0][0]), kv[0])):
        cells = " | ".join(
            "error" if t.error else f"{t.ms:.2f} ({t.median_ms:.2f}) / {t.buffers:,}"
            for t in timings
        )
        t_ratio, w_ratio = by_time.get((name, mode)), by_work.get((name, mode))
        rows.append(
            f"| `{name}` | {_path(name)} | {mode} | {cells} |"
            f" {'-' if t_ratio is None else f'{t_ratio:.2f}'} |"
            f" {'-' if w_ratio is None else f'{w_ratio:.2f}'} |"
            f" {timings[-1].error or timings[-1].plan} |"
        )
    over_keys = sorted(
        {
            k
            for k, v in (*by_time.items(), *by_work.items())
            if v > TARGET_RATIO and _path(k[0]) != "keyed"
        }
    )
    grown = sorted({k[0] for k, v in (*by_time.items(), *by_work.items()) if v > TARGET_RATIO})
    notes = "\n".join(
        [
            "| query | path | time ratio (custom, generic) | work ratio (custom, generic) | plan note |",
            "|---|---|---|---|---|",
        ]
        + [
            f"| `{name}` | {_path(name)} |"
            f" {', '.join(_ratio(by_time.get((name, m))) for m in MODES)} |"
            f" {', '.join(_ratio(by_work.get((name, m))) for m in MODES)} |"
            f" {PLAN_NOTES.get(name, 'no note: not explained yet')} |"
            for name in grown
        ]
    )
    over_rows = "\n".join(
        [
            "| query | mode | time ratio | work ratio | call log partitions in the plan, smallest"
            " to largest size | plan at the largest size |",
            "|---|---|---|---|---|---|",
        ]
        + [
            f"| `{name}` | {mode} | {_ratio(by_time.get((name, mode)))} |"
            f" {_ratio(by_work.get((name, mode)))} |"
            f" {weeks_read(by_query[name, mode][0].plan)} to"
            f" {weeks_read(by_query[name, mode][-1].plan)} | {by_query[name, mode][-1].plan} |"
            for name, mode in over_keys
        ]
    )
    table_rows = "\n".join(
        f"| {t} | {before[t] / small.runs:,.0f} | {small.bytes[t] / small.runs:,.0f} |"
        f" {large.bytes[t] / large.runs:,.0f} |"
        for t in (*HISTORY_TABLES, *DOCUMENT_TABLES)
    )
    history_before = sum(before[t] for t in HISTORY_TABLES) / small.runs
    history_after = per_run(small, HISTORY_TABLES)
    pruned = "\n".join(
        f"| {r.runs:,} | {r.pruned['runs_days']} / {r.pruned['call_log_days']} |"
        f" {r.pruned['runs_gone']:,} runs, {r.pruned['deleted'].get('document', 0):,} documents,"
        f" {r.pruned['calls_gone']:,} calls ({r.pruned['deleted'].get('llm_call_log_partitions', 0)}"
        f" partitions) | {r.pruned['seconds']:.1f} | {r.pruned['runs_per_s']:,.0f} |"
        f" {r.pruned['documents_per_s']:,.0f} |"
        f" {_rows_pruned(r.pruned) / r.pruned['seconds']:,.0f} |"
        for r in results
    )
    days = ", ".join(f"{r.runs:,} runs are {r.history_days:.0f} days" for r in results)
    weeks = ", ".join(f"{r.call_log_partitions} at {r.runs:,} runs" for r in results)
    kept_small = (
        "every call kept"
        if small.history_days <= defaults.retention_call_log_days
        else f"calls of the last {defaults.retention_call_log_days} days kept"
    )
    loads = "; ".join(
        f"load average {r.load[0]:.1f} over a minute, {r.load[1]:.1f} over 5, as the queries at"
        f" {r.runs:,} runs had been timed"
        for r in results
        if r.load
    )
    return f"""# Flat at scale: what every named query costs as history grows

`python -m bench.scale --sizes {args.sizes} --repeat {args.repeat}`: for each size a
throwaway PostgreSQL (1 GB of shared buffers) filled through docpipe's migrations by
`bench.busy` (a steady 11,000 runs a day: {days}; the same work in flight at every size:
16,000 batch runs waiting for admission, 64 admitted, 40 interactive, 400 awaiting a
person). Every named query runs as a prepared statement would, with its custom plan and with
the generic plan, {args.repeat} times after a warm-up, each in a transaction rolled back.

This machine's 2 cores are shared with other work ({loads}), so a statement's time varies
several-fold from one run to the next, and between sizes timed under different loads: the tables give
the fastest run (the least disturbed) and the median, and the shared buffers the statement
touched, which is its work and does not depend on the load. A ratio of times is given only
where a query takes {NOISE_MS:g} ms or more at one of the sizes.

## Headline

- Admission with free slots (`admit_batch_runs`, 8 of 72 slots free) at {large.runs:,} runs:
  **{_ms(large, "admit_batch_runs", "custom"):.1f} ms** custom, **{_ms(large, "admit_batch_runs", "generic"):.1f} ms** generic
  (fastest of {args.repeat}).
- A metrics scrape (the PostgreSQL part of beat's collector: every gauge) at {large.runs:,}
  runs: **{large.scrape_ms[0]:.1f} ms** (median {large.scrape_ms[1]:.1f}); at {small.runs:,}:
  {small.scrape_ms[0]:.1f} ms (median {small.scrape_ms[1]:.1f}).
- Work ({large.runs:,} runs over {small.runs:,}, in buffers touched) above 2x: {_over(by_work)}.
- Time above 2x (of those taking {NOISE_MS:g} ms or more): {_over(by_time)}.
- Bytes per run of history (runs, steps, calls, outbox, webhooks, decisions, batches;
  documents apart): **{history_before:,.0f} before, {history_after:,.0f} now** (at
  {small.runs:,} runs, {small.history_days:.0f} days: {kept_small}); within the default retention (calls kept
  {defaults.retention_call_log_days} days, now in whole weeks, of a run's
  {defaults.retention_runs_days}; outbox rows {defaults.retention_outbox_days}):
  **{f["bytes_per_run_retained_before"]:,.0f} before, {f["bytes_per_run_retained"]:,.0f} now**.

## Targets (issue 36)

| target | measured | met |
|---|---|---|
| every periodic and list query's time within {TARGET_RATIO:g}x from {small.runs:,} to {large.runs:,} runs (of those taking {NOISE_MS:g} ms or more) | worst {f["periodic_list_worst_time_ratio"]:.2f}x, `{f["periodic_list_worst_time_query"]}` | {_met(not f["periodic_list_over_2x_time"])} |
| every periodic and list query's work (buffers touched) within {TARGET_RATIO:g}x, or grown with what is in flight, not with history (its plan note below) | worst {f["periodic_list_worst_work_ratio"]:.2f}x, `{f["periodic_list_worst_work_query"]}`; above {TARGET_RATIO:g}x with history: {", ".join(f["periodic_list_over_2x_work_with_history"]) or "none"} | {_met(not f["periodic_list_over_2x_work_with_history"])} |
| admission with free slots under {TARGET_ADMISSION_MS:g} ms at {large.runs:,} runs | {f["admission_free_slots_ms"]:.1f} ms (the slower plan) | {_met(f["admission_free_slots_ms"] < TARGET_ADMISSION_MS)} |
| a metrics scrape under {TARGET_SCRAPE_MS:g} ms at {large.runs:,} runs | {large.scrape_ms[0]:.1f} ms (median {large.scrape_ms[1]:.1f}) | {_met(large.scrape_ms[0] < TARGET_SCRAPE_MS)} |
| 10,000,000 runs | not measured: the fill needs about 80 GB of disk | - |

## Periodic and list queries above {TARGET_RATIO:g}x

{over_rows}

A query that reads a run's calls plans a probe of each weekly partition of the call log, a
few buffers each where it runs: `finish_calls`, `route_call`, `run_steps` and
`evaluation_runs` skip, as they run, the weeks before the run was created (their plans list
every partition; those skipped are never executed), and probe the weeks since; `prune_runs`
probes the weeks from the start of the runs it deletes to a day past their end. The fill
keeps calls for the call log's retention of {defaults.retention_call_log_days} days, as beat
does, dropping older weeks whole: weekly partitions holding calls, {weeks}; a history longer
than the retention holds the same number whatever its length (and two empty weeks ahead and
the default partition).
Tables that stay a few pages (`batch`) are read whole by the planner's choice at any size
here.

## Plan notes

Why each query above 2x (periodic, list or keyed; time or work) grew, and what was done.

{notes}

## Bytes per run

Each table with its indexes and TOAST, divided by the runs; calls kept for the call log's
retention of {defaults.retention_call_log_days} days (every call at a size whose history is
shorter). Before: the schema of migration {BEFORE}, the same fill.

| table | before, {small.runs:,} runs | now, {small.runs:,} runs | now, {large.runs:,} runs |
|---|---|---|---|
{table_rows}

Within the default retention a deployment at a steady rate holds every run's rows for
{defaults.retention_runs_days} days, its calls for {defaults.retention_call_log_days} (before:
deleted row by row at that age) or, now that whole weeks are dropped, {defaults.retention_call_log_days} to
{defaults.retention_call_log_days + 7} ({defaults.retention_call_log_days + 3.5:g} on average), and its outbox
rows for {defaults.retention_outbox_days}: per run held, {f["bytes_per_run_retained_before"]:,.0f} bytes
before and {f["bytes_per_run_retained"]:,.0f} now, documents apart
({f["document_bytes_per_run"]:,.0f} bytes a run here, the fill's documents being
{SHAPE_DOCUMENT_BYTES:,} bytes of text).

## Retention

The oldest fifth of the runs (runs and documents retention: the days given) and half of the
call log's kept weeks (call log retention) past their retention; beat's passes until nothing
is left.

| runs | retention days (runs / calls) | removed | seconds | runs/s | documents/s | rows/s, every table |
|---|---|---|---|---|---|---|
{pruned}

## Every named query

Path: periodic (beat's timers and admission), list (behind a page or a list), keyed (one
row or run by its key). Plan: the scans of the plan at {large.runs:,} runs. Queries in
`CUSTOM_PLAN` are never prepared, so they have no generic row.

| query | path | mode | {head} | time ratio | work ratio | plan at {large.runs:,} runs |
|---|---|---|{"---|" * len(results)}---|---|---|
{chr(10).join(rows)}
"""


if __name__ == "__main__":
    main()
