"""A database shaped like a busy deployment's, for benchmarks of what grows with history.

``busy_database(Shape(runs=1_000_000))`` starts a throwaway PostgreSQL, applies docpipe's
migrations (``docpipe migrate``'s code) and fills it; ``fill(url, shape)`` fills a migrated,
empty database of your own. Both give back a :class:`Filled` that names what a benchmark
needs: the tenants (one large one), API keys of three of them, a large ended batch and the
running one.

The shape is a deployment that has run for a while at a steady rate (``runs_per_day``), so a
larger fill is a longer history, not a busier day: 50 tenants, one with 40 % of the runs;
70 % of the runs in batches of 100 to 10,000 documents, the rest one at a time; 96.8 % done,
the rest failed, cancelled, expired or over budget; four steps and about 14 provider calls a
run (``document_extract:v1``), with outputs and answers the size the sample contracts give;
published outbox rows of the last ``outbox_days``, webhooks delivered for callers that asked,
some reviews answered. What is in flight is the same at every size (work in progress does
not grow with history): three running batches with ``waiting`` runs waiting for admission,
``in_flight`` batch runs admitted, a few interactive runs, and ``review_backlog`` runs
awaiting a person.

Rows are made by set-based INSERTs inside PostgreSQL (about 50,000 runs, with their steps
and calls, a second on 2 cores), deterministic for a given seed.

    python -m bench.busy --runs 100000          # fill, print the URL and keys, keep serving
    python -m bench.busy --runs 100000 --url URL  # fill an empty database (migrated here)
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench import busy_sql
from bench.busy_templates import VARIANTS, templates
from docpipe.pipelines.catalog import get_pipeline
from docpipe.state.db import Database
from docpipe.state.migrate import apply_migrations
from docpipe.state.tenants import create_api_key
from docpipe_dev.localstack import LocalPostgres

__all__ = ["Filled", "Shape", "busy_database", "busy_database_server", "fill"]

PIPELINE = "document_extract:v1"


@dataclass(frozen=True)
class Shape:
    """What to fill; the defaults are the busy deployment described above."""

    runs: int
    seed: int = 7
    tenants: int = 50
    big_tenant_share: float = 0.4
    runs_per_day: int = 11_000  # 1,000,000 runs are 91 days of history
    interactive_share: float = 0.3
    batch_sizes: tuple[int, int] = (100, 10_000)  # log-uniform between
    call_log_days: int | None = None  # calls of older runs pruned; None: every run's calls
    outbox_days: int = 7  # published outbox rows kept (DOCPIPE_RETENTION_OUTBOX_DAYS)
    document_bytes: int = 1_500  # below TOAST's threshold: stored as is, filled fast
    # In flight, the same at every size:
    waiting: int = 16_000  # batch runs waiting for admission, in the three running batches
    in_flight: int = 64  # admitted batch runs (the admission window)
    interactive_in_flight: int = 40
    review_backlog: int = 400  # runs awaiting a person, paused within the last review_days
    review_days: int = 3
    answered_review_share: float = 0.01
    callback_share: float = 0.2  # of interactive runs; a third of batches


@dataclass(frozen=True)
class Filled:
    url: str
    shape: Shape
    runs: int
    history_days: float
    tenants: tuple[str, ...]
    big_tenant: str
    api_keys: dict[str, str]  # tenant -> plaintext key (the big tenant and two others)
    big_batch_id: str  # the big tenant's largest ended batch
    running_batch_id: str  # the big tenant's running batch
    seconds: float = 0.0
    rows: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Batch:
    n: int
    id: uuid.UUID
    tenant: str
    size: int
    first: int
    created_at_s_ago: float
    duration_s: float
    status: str
    callback: bool
    active_done: int = 0  # running batches: runs done, then admitted, then waiting
    active_admitted: int = 0


def _tenants(shape: Shape) -> tuple[list[str], list[float]]:
    names = [f"tenant-{i:02d}" for i in range(shape.tenants)]
    rest = [1 / (i + 1) for i in range(shape.tenants - 1)]  # Zipf among the others
    weights = [shape.big_tenant_share] + [
        (1 - shape.big_tenant_share) * w / sum(rest) for w in rest
    ]
    return names, weights


def _plan(shape: Shape, history_runs: int, span_s: float) -> list[_Batch]:
    """The batches: ended ones over the history, then the three running ones."""
    rng = random.Random(shape.seed)
    names, weights = _tenants(shape)
    low, high = (math.log(s) for s in shape.batch_sizes)
    batch_runs = round(history_runs * (1 - shape.interactive_share))
    plan: list[_Batch] = []
    first = 0
    while first < batch_runs:
        size = min(round(math.exp(rng.uniform(low, high))), batch_runs - first)
        plan.append(
            _Batch(
                n=len(plan),
                id=uuid.UUID(int=rng.getrandbits(128), version=4),
                tenant=rng.choices(names, weights)[0],
                size=size,
                first=first,
                created_at_s_ago=3 * 3600 + rng.random() * max(0.0, span_s - 3 * 3600),
                duration_s=size * 8.0 / shape.in_flight,  # the window's pace, 8 s a run
                status="cancelled" if rng.random() < 0.01 else "done",
                callback=rng.random() < 1 / 3,
            )
        )
        first += size
    first = history_runs + 0  # the running batches come after every ended run
    shares = (0.75, 0.15, 0.10)  # of the waiting and in-flight runs, by batch
    for k, (tenant, share) in enumerate(zip((names[0], names[1], names[7]), shares, strict=True)):
        admitted = round(shape.in_flight * share)
        waiting = round(shape.waiting * share)
        done = waiting // 4
        size = done + admitted + waiting
        plan.append(
            _Batch(
                n=len(plan),
                id=uuid.UUID(int=rng.getrandbits(128), version=4),
                tenant=tenant,
                size=size,
                first=first,
                created_at_s_ago=(3 - k) * 1800,
                duration_s=0,
                status="running",
                callback=k == 0,
                active_done=done,
                active_admitted=admitted,
            )
        )
        first += size
    return plan


def fill(url: str, shape: Shape, *, chunk_runs: int = 100_000, progress: bool = False) -> Filled:
    """Fill the migrated, empty database at ``url`` with ``shape``; returns what it holds."""
    started = time.monotonic()
    active = shape.waiting + shape.in_flight + shape.interactive_in_flight
    active += (shape.waiting // 4) * 1  # the running batches' runs already done
    history_runs = max(0, shape.runs - active)
    span_s = max(1.0, history_runs / shape.runs_per_day * 86_400)
    plan = _plan(shape, history_runs, span_s)
    names, weights = _tenants(shape)
    pipeline = get_pipeline(PIPELINE)
    interactive_first = sum(b.size for b in plan if b.status != "running")
    interactive_last = history_runs  # exclusive
    total = plan[-1].first + plan[-1].size + shape.interactive_in_flight
    recent_runs = shape.runs_per_day * shape.review_days
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"SET synchronous_commit = off")
        # A bulk load, as pg_restore --disable-triggers does it: the rows are consistent by
        # construction (tests/integration/test_busy_fill.py checks), and a foreign-key check
        # per row would be most of the time.
        conn.execute(b"SET session_replication_role = replica")
        conn.execute(b"SET jit = off")  # compiling these INSERTs costs more than running them
        busy_sql.prepare(
            conn,
            seed=shape.seed,
            tenant_slots=_slots(names, weights),
            batches=[
                (
                    b.n,
                    b.id,
                    b.tenant,
                    b.size,
                    b.first,
                    b.created_at_s_ago,
                    b.duration_s,
                    b.status,
                    b.callback,
                    b.active_done,
                    b.active_admitted,
                )
                for b in plan
            ],
            templates=templates(shape.seed),
            variants=VARIANTS,
            params={
                "seed": shape.seed,
                "span_s": span_s,
                "review_p": min(1.0, shape.review_backlog / max(1, recent_runs)),
                "review_days": shape.review_days,
                "answered_p": shape.answered_review_share,
                "callback_p": shape.callback_share,
                "call_log_days": shape.call_log_days,
                "outbox_days": shape.outbox_days,
                "document_bytes": shape.document_bytes,
                "pipeline": PIPELINE,
                "pipeline_hash": pipeline.definition_hash,
                "interactive_in_flight": shape.interactive_in_flight,
            },
        )
        busy_sql.insert_batches(conn)
        calls_s = span_s if shape.call_log_days is None else shape.call_log_days * 86_400
        busy_sql.call_log_partitions(conn, min(span_s, calls_s) + 3600)
        chunks = [
            ("batch", lo, min(lo + chunk_runs, interactive_first))
            for lo in range(0, interactive_first, chunk_runs)
        ]
        chunks += [
            ("interactive", lo, min(lo + chunk_runs, interactive_last))
            for lo in range(interactive_first, interactive_last, chunk_runs)
        ]
        chunks += [("active", interactive_last, total)]
        for kind, lo, hi in chunks:
            busy_sql.fill_runs(conn, kind, lo, hi)
            if progress:
                print(
                    f"  {kind} runs {lo:,}-{hi:,} ({time.monotonic() - started:.0f} s)", flush=True
                )
        busy_sql.finish(conn)
        rows = busy_sql.row_counts(conn)
        big_batch = busy_sql.largest_ended_batch(conn, names[0])
    db = Database(url, max_size=1)
    try:
        keys = {
            t: create_api_key(db, t, name="bench").plaintext for t in (names[0], names[1], names[7])
        }
    finally:
        db.close()
    running = next(b for b in plan if b.status == "running")
    return Filled(
        url=url,
        shape=shape,
        runs=rows["pipeline_run"],
        history_days=span_s / 86_400,
        tenants=tuple(names),
        big_tenant=names[0],
        api_keys=keys,
        big_batch_id=big_batch,
        running_batch_id=str(running.id),
        seconds=time.monotonic() - started,
        rows=rows,
    )


def _slots(names: list[str], weights: list[float]) -> list[str]:
    """1,000 slots, each a tenant as often as its weight says (for picks by hash)."""
    slots: list[str] = []
    for name, weight in zip(names, weights, strict=True):
        slots += [name] * round(weight * 1000)
    return (slots + [names[0]] * 1000)[:1000]


@contextmanager
def busy_database_server() -> Iterator[LocalPostgres]:
    """A throwaway PostgreSQL server for filled databases (1 GB of shared buffers, as a
    modest production server has), removed with its files afterwards."""
    state = Path(tempfile.mkdtemp(prefix="docpipe-busy-"))
    state.chmod(0o711)
    try:
        with LocalPostgres(state / "pg") as pg:
            with psycopg.connect(pg.url, autocommit=True) as conn:
                conn.execute(b"ALTER SYSTEM SET shared_buffers = '1GB'")
            pg.restart()
            yield pg
    finally:
        shutil.rmtree(state, ignore_errors=True)


@contextmanager
def busy_database(shape: Shape, *, progress: bool = False) -> Iterator[Filled]:
    """A throwaway PostgreSQL holding a migrated database filled with ``shape``; removed
    (server and files) afterwards."""
    with busy_database_server() as pg:
        url = pg.create_database("docpipe_busy")
        apply_migrations(url)
        yield fill(url, shape, progress=progress)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--call-log-days", type=int, default=None)
    parser.add_argument("--url", help="an empty database to migrate and fill (kept)")
    args = parser.parse_args()
    shape = Shape(runs=args.runs, seed=args.seed, call_log_days=args.call_log_days)
    if args.url:
        apply_migrations(args.url)
        _print(fill(args.url, shape, progress=True))
        return
    with busy_database(shape, progress=True) as filled:
        _print(filled)
        print("serving; Ctrl-C stops the server and removes its files", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


def _print(filled: Filled) -> None:
    print(
        f"{filled.runs:,} runs ({filled.history_days:.0f} days) in {filled.seconds:.0f} s: {filled.url}"
    )
    for table, n in filled.rows.items():
        print(f"  {table:24} {n:>12,}")
    for tenant, key in filled.api_keys.items():
        print(f"  key of {tenant}: {key}")
    print(f"  big ended batch {filled.big_batch_id}, running batch {filled.running_batch_id}")


if __name__ == "__main__":
    main()
