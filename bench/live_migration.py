"""Migration 0073 on a live, filled call log: the table becomes partitioned while calls are
written, finished and read, and nothing is lost.

A database is migrated up to 0071 (the call log as a plain table) and filled (bench.busy);
then writer threads log and finish calls and reader threads read calls by run, with
prepared statements and the old statements (what the running version does while the new
one migrates), while ``docpipe migrate`` applies 0072-0074. Afterwards every call a writer
was told is on record is there exactly once, finished as it was finished, the table is
partitioned with the old one attached as its first partition, and each statement's longest
wait during the migration is known.

    python -m bench.live_migration [--runs 1000000]    # writes docs/benchmarks/live-migration.md
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import psycopg

from bench.busy import Shape, busy_database_server, fill
from bench.harness import write_report
from docpipe.state.migrate import apply_migrations

__all__ = ["CallTraffic", "LiveMigration", "migrate_live", "migrations_up_to"]

LAST_BEFORE = "0071"  # the call log is a plain table up to here

# What the running version (before 0073) does to the call log: its statements, prepared.
_LOG_CALL = (
    b"INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id,"
    b" model, prompt_version) VALUES (%s, 'extract_fields', 0, %s, 1, %s, 'gpt-4o-mini',"
    b" 'extract_fields@v1') RETURNING id"
)
_FINISH_CALL = (
    b"UPDATE llm_call_log SET status = 'ok', http_status = 200, response = %s::jsonb,"
    b" finished_at = now() WHERE id = %s AND status = 'sent'"
)
_READ_CALLS = b"SELECT count(*) FROM llm_call_log WHERE run_id = %s AND status = 'ok'"


def migrations_up_to(last: str, folder: Path) -> Path:
    """A folder holding docpipe's migrations up to ``last`` (by name prefix)."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in files("docpipe.state").joinpath("sql/migrations").iterdir():
        if entry.name.endswith(".sql") and entry.name[:4] <= last:
            (folder / entry.name).write_text(entry.read_text(encoding="utf-8"))
    return folder


@dataclass
class _Worker:
    longest_ms: float = 0.0
    statements: int = 0
    errors: list[str] = field(default_factory=list)
    logged: dict[int, bool] = field(default_factory=dict)  # id -> finished


class CallTraffic:
    """Writers that log and finish calls, readers that read them, until stopped."""

    def __init__(self, url: str, runs: list[tuple[Any, str]], writers: int = 2, readers: int = 2):
        self.url = url
        self.runs = runs
        self._stop = threading.Event()
        self.writers = [_Worker() for _ in range(writers)]
        self.readers = [_Worker() for _ in range(readers)]
        self._threads = [
            threading.Thread(target=self._write, args=(w, i), daemon=True)
            for i, w in enumerate(self.writers)
        ] + [
            threading.Thread(target=self._read, args=(r, i), daemon=True)
            for i, r in enumerate(self.readers)
        ]

    def __enter__(self) -> CallTraffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _timed(self, worker: _Worker, conn: psycopg.Connection[Any], sql: bytes, *args: Any) -> Any:
        started = time.perf_counter()
        cur = conn.execute(sql, args, prepare=True)
        row = cur.fetchone() if cur.description else None
        worker.longest_ms = max(worker.longest_ms, 1000 * (time.perf_counter() - started))
        worker.statements += 1
        return row

    def _write(self, worker: _Worker, n: int) -> None:
        rng = random.Random(n)
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                k = 0
                while not self._stop.is_set():
                    run_id, tenant = rng.choice(self.runs)
                    k += 1
                    row = self._timed(worker, conn, _LOG_CALL, run_id, f"w{n}:{k}", tenant)
                    worker.logged[row[0]] = False
                    if k % 2:  # every other call is answered
                        self._timed(worker, conn, _FINISH_CALL, '{"fields": {}}', row[0])
                        worker.logged[row[0]] = True
        except psycopg.Error as exc:
            worker.errors.append(f"{type(exc).__name__}: {exc}")

    def _read(self, worker: _Worker, n: int) -> None:
        rng = random.Random(1000 + n)
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self._stop.is_set():
                    self._timed(worker, conn, _READ_CALLS, rng.choice(self.runs)[0])
        except psycopg.Error as exc:
            worker.errors.append(f"{type(exc).__name__}: {exc}")


@dataclass
class LiveMigration:
    calls_before: int
    calls_after: int
    logged: int
    finished: int
    missing: int  # logged calls not on record afterwards (or twice)
    unfinished: int  # calls finished by a writer but not so on record
    errors: list[str]
    migrate_s: float
    longest_write_ms: float
    longest_read_ms: float
    statements: int
    partitions: list[str]


def migrate_live(
    url: str, *, writers: int = 2, readers: int = 2, settle_s: float = 1.0
) -> LiveMigration:
    """Apply every migration left on the filled database at ``url`` (migrated up to
    LAST_BEFORE) under call traffic, and check what the traffic wrote."""
    with psycopg.connect(url, autocommit=True) as conn:
        runs = conn.execute(
            b"SELECT id, tenant_id FROM pipeline_run ORDER BY created_at DESC LIMIT 500"
        ).fetchall()
        before = conn.execute(b"SELECT count(*) FROM llm_call_log").fetchone()[0]  # type: ignore[index]
    with CallTraffic(url, runs, writers, readers) as traffic:
        time.sleep(settle_s)  # the traffic is going before the migration starts
        started = time.monotonic()
        apply_migrations(url)
        migrate_s = time.monotonic() - started
        time.sleep(settle_s)  # and goes on after it
    logged = {i: done for w in traffic.writers for i, done in w.logged.items()}
    with psycopg.connect(url, autocommit=True) as conn:
        on_record = dict(
            conn.execute(
                b"SELECT id, status FROM llm_call_log WHERE id = ANY(%s)", (list(logged),)
            ).fetchall()
        )
        after = conn.execute(b"SELECT count(*) FROM llm_call_log").fetchone()[0]  # type: ignore[index]
        partitions = [
            r[0]
            for r in conn.execute(
                b"SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                b" WHERE i.inhparent = 'llm_call_log'::regclass ORDER BY 1"
            )
        ]
    workers = traffic.writers + traffic.readers
    return LiveMigration(
        calls_before=before,
        calls_after=after,
        logged=len(logged),
        finished=sum(logged.values()),
        missing=len(set(logged) - set(on_record)),
        unfinished=sum(1 for i, done in logged.items() if done and on_record.get(i) != "ok"),
        errors=[e for w in workers for e in w.errors],
        migrate_s=migrate_s,
        longest_write_ms=max(w.longest_ms for w in traffic.writers),
        longest_read_ms=max(w.longest_ms for w in traffic.readers),
        statements=sum(w.statements for w in workers),
        partitions=partitions,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="docpipe-migrations-"))
    try:
        with busy_database_server() as server:
            url = server.create_database("docpipe_live")
            apply_migrations(url, folder=migrations_up_to(LAST_BEFORE, folder))
            filled = fill(url, Shape(runs=args.runs), progress=True)
            with psycopg.connect(url, autocommit=True) as conn:
                size = conn.execute(
                    b"SELECT pg_size_pretty(pg_total_relation_size('llm_call_log'))"
                ).fetchone()[0]  # type: ignore[index]
            result = migrate_live(url)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(result, flush=True)
    load = os.getloadavg()[1]
    write_report(
        "live-migration",
        f"""# Partitioning a live call log (migration 0073)

`python -m bench.live_migration --runs {args.runs}`: a database migrated up to
{LAST_BEFORE} and filled with {filled.runs:,} runs (`bench.busy`): {result.calls_before:,}
calls, {size} with their indexes. Two writers log calls and finish every other one, two
readers read a run's finished calls, all with prepared statements and the statements of the
version before 0073, while `docpipe migrate` applies 0072-0074.

| | |
|---|---|
| migration (prepare, validate every row, switch, weeks ahead) | {result.migrate_s:.1f} s |
| statements run by the traffic meanwhile | {result.statements:,} |
| longest write / read during it | {result.longest_write_ms:.0f} ms / {result.longest_read_ms:.0f} ms |
| calls logged / finished by the traffic | {result.logged:,} / {result.finished:,} |
| of those not on record afterwards / not finished on record | {result.missing} / {result.unfinished} |
| errors seen by the traffic | {len(result.errors)} |
| calls before / after | {result.calls_before:,} / {result.calls_after:,} |
| partitions afterwards | {", ".join(result.partitions)} |

The machine's load average over the last 5 minutes, at the end: {load:.1f} (its cores are
shared with other work: the times are this load's as much as the migration's).
""",
        {
            "runs": filled.runs,
            "calls_before": result.calls_before,
            "migrate_s": result.migrate_s,
            "longest_write_ms": result.longest_write_ms,
            "longest_read_ms": result.longest_read_ms,
            "missing": result.missing,
            "errors": len(result.errors),
        },
    )


if __name__ == "__main__":
    main()
