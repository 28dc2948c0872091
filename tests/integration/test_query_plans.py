"""No named query reads the history: on a database filled like a busy deployment's (large
enough that the planner prefers an index wherever one serves), the plan of every periodic,
list and keyed query, custom and generic, reads pipeline_run, pipeline_step_result and
llm_call_log through indexes only. A new query that scans one of them fails here, with the
plan's scans in the message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench.busy import Shape, fill
from bench.query_plans import MODES, QueryLab, plan_note, scans
from docpipe.state.db import load_queries
from docpipe.state.migrate import apply_migrations
from docpipe.state.query_paths import CUSTOM_PLAN, KEYED, LISTS, PERIODIC
from tests.support.servers import create_database

# 20,000 runs (280,000 calls): a few seconds to fill, and tables of thousands of pages, where
# a sequential scan costs what it would cost at any size and the planner knows it.
SHAPE = Shape(runs=20_000, waiting=2_000, review_backlog=100)


def test_every_named_query_has_one_path() -> None:
    paths = {"PERIODIC": PERIODIC, "LISTS": LISTS, "KEYED": KEYED}
    placed = [name for names in paths.values() for name in names]
    assert len(placed) == len(set(placed)), "a query is in two paths"
    unplaced = set(load_queries()) - set(placed)
    assert not unplaced, (
        f"{sorted(unplaced)}: put each in PERIODIC, LISTS or KEYED of "
        f"docpipe/state/query_paths.py (it is then checked for scans here)"
    )
    assert not set(placed) - set(load_queries()), "query_paths names a query that is gone"
    assert set(CUSTOM_PLAN) <= set(load_queries())


@pytest.fixture(scope="module")
def lab(postgres_admin_url: str) -> Iterator[QueryLab]:
    url = create_database(postgres_admin_url, "docpipe_plans")
    apply_migrations(url)
    fill(url, SHAPE)
    with psycopg.connect(url, autocommit=True) as conn:
        yield QueryLab(conn, load_queries())


@pytest.fixture
def own_lab(lab: QueryLab) -> Iterator[QueryLab]:
    """A lab on a connection of its own to the filled database: its statements prepared
    afresh, whatever the module's lab did to its connection."""
    with psycopg.connect(lab.conn.info.dsn, autocommit=True) as conn:
        yield QueryLab(conn, load_queries())


def _plans(lab: QueryLab, name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for mode in MODES:
        if mode == "generic" and name in CUSTOM_PLAN:
            continue  # never prepared: always planned with its values
        yield mode, lab.plan(name, mode)


@pytest.mark.slow  # reads the 20,000-run fill
def test_no_named_query_scans_the_history(lab: QueryLab) -> None:
    scanning = [
        f"{name} ({mode}): {plan_note(plan)}"
        for name in sorted(PERIODIC | LISTS | KEYED)
        for mode, plan in _plans(lab, name)
        if lab.history_scans(plan)
    ]
    assert not scanning, "sequential scans of the history's tables:\n" + "\n".join(scanning)


@pytest.mark.slow  # reads the 20,000-run fill
def test_the_guard_sees_a_query_that_counts_every_run(lab: QueryLab) -> None:
    canary = QueryLab(
        lab.conn,
        {
            "count_runs": "SELECT status, count(*) FROM pipeline_run GROUP BY status",
            "calls_of_tenant": (
                "SELECT count(*) FROM llm_call_log WHERE tenant_id = %(tenant_id)s"
            ),
        },
    )
    for name in ("count_runs", "calls_of_tenant"):
        for mode in MODES:
            assert canary.history_scans(canary.plan(name, mode)), (name, mode)


# Statements on one step of a run that is running: keyed by (run_id, step); and the lease
# renewal, keyed by the (run_id, step) a worker holds (the sample's runs hold none).
ON_A_RUNNING_STEP = (
    "abandon_step",
    "fail_run",
    "give_up_lease",
    "record_step_result",
    "release_step",
    "renew_leases",
)


def _rows_filtered_out(plan: dict[str, Any], relation: str) -> int:
    """Rows of ``relation`` a plan (EXPLAIN ANALYZE) read and threw away by a filter."""
    found = plan.get("Rows Removed by Filter", 0) if plan.get("Relation Name") == relation else 0
    return found + sum(_rows_filtered_out(child, relation) for child in plan.get("Plans", ()))


@pytest.mark.slow  # reads the 20,000-run fill
def test_a_statement_on_one_step_reads_that_step_however_rare_running_steps_look(
    own_lab: QueryLab,
) -> None:
    """Running steps are a few dozen among millions of steps: a statistics sample often holds
    none, and the planner then takes 'running' for about one row. A statement keyed by
    (run_id, step) must still read that step alone, whatever index it picks; an index of the
    running steps led by anything else was read whole (every running step thrown away by
    the filter but one)."""
    own_lab.conn.execute(
        b"UPDATE pg_statistic s"
        b" SET stanumbers1 = ARRAY(SELECT CASE WHEN v = 'running' THEN 1e-9 ELSE f END"
        b"                         FROM unnest(s.stavalues1::text::text[], s.stanumbers1)"
        b"                         AS u(v, f))"
        b" FROM pg_attribute a"
        b" WHERE a.attrelid = s.starelid AND a.attnum = s.staattnum AND s.stakind1 = 1"
        b"   AND s.starelid = 'pipeline_step_result'::regclass AND a.attname = 'status'"
    )
    try:
        running = own_lab.conn.execute(
            b"SELECT count(*) FROM pipeline_step_result WHERE status = 'running'"
        ).fetchone()
        assert running is not None and running[0] > 20
        for name in ON_A_RUNNING_STEP:
            for mode in MODES:
                _, plan = own_lab.time(name, mode, repeat=1)
                assert _rows_filtered_out(plan, "pipeline_step_result") <= 1, (
                    f"{name} ({mode}) read every running step: {plan_note(plan)}"
                )
    finally:
        own_lab.conn.execute(b"ANALYZE pipeline_step_result")


@pytest.mark.slow  # reads the 20,000-run fill
def test_no_periodic_or_list_query_reads_every_batch(own_lab: QueryLab) -> None:
    """The batch table holds every batch of the runs' retention: thousands at a busy
    deployment, a few pages in the filled database, where the planner rightly reads it
    whole. With 30,000 ended batches (added in a transaction rolled back), no periodic or
    list query may."""
    own_lab.conn.execute(b"BEGIN")
    try:
        own_lab.conn.execute(
            b"INSERT INTO batch (id, tenant_id, pipeline, status, runs_total, callback_url,"
            b"                   created_at, finished_at, notified_at)"
            b" SELECT gen_random_uuid(), 'tenant-' || lpad((g % 50)::text, 2, '0'),"
            b"        'document_extract:v1', 'done', 100,"
            b"        CASE WHEN g % 3 = 0 THEN 'https://example.com/hook' END,"
            b"        now() - make_interval(days => g % 90), now() - make_interval(days => g % 90),"
            b"        now() - make_interval(days => g % 90)"
            b" FROM generate_series(1, 30000) g"
        )
        own_lab.conn.execute(b"ANALYZE batch")
        reading = [
            f"{name} ({mode}): {plan_note(plan)}"
            for name in sorted(PERIODIC | LISTS)
            for mode, plan in _plans(own_lab, name)
            if any(s.node == "Seq Scan" and s.relation == "batch" for s in scans(plan))
        ]
    finally:
        own_lab.conn.execute(b"ROLLBACK")
    assert not reading, "sequential scans of the batch table:\n" + "\n".join(reading)
