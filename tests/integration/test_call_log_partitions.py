"""The call log partitioned by week: migration 0073 turns a filled table into a partitioned
one while calls are written and read (nothing lost, no long wait), and answers are stored
compressed and read back as they were."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from bench.busy import Shape, fill
from bench.live_migration import LAST_BEFORE, migrate_live, migrations_up_to
from docpipe.state.call_log import CallFinish, CallKey, check_and_start_calls, finish_calls
from docpipe.state.db import Database
from docpipe.state.migrate import apply_migrations
from tests.support.factories import new_run, scalar
from tests.support.servers import create_database


def test_partitioning_a_filled_call_log_under_traffic_loses_nothing(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    url = create_database(postgres_admin_url, "docpipe_live")
    apply_migrations(url, folder=migrations_up_to(LAST_BEFORE, tmp_path / "migrations"))
    fill(url, Shape(runs=4_000, waiting=400, review_backlog=20))

    result = migrate_live(url)

    assert result.errors == []
    assert result.logged > 50 and result.finished > 25, "the traffic went on meanwhile"
    assert (result.missing, result.unfinished) == (0, 0)
    assert result.calls_after == result.calls_before + result.logged
    # The filled table is the partition of the time before its cutover, beside the default
    # partition and the weeks ahead; none waited long for the switch.
    assert "llm_call_log_legacy" in result.partitions
    assert "llm_call_log_default" in result.partitions
    assert any(p.startswith("llm_call_log_p2") for p in result.partitions)
    assert result.longest_write_ms < 5_000 and result.longest_read_ms < 5_000
    with psycopg.connect(url) as conn:
        kind = conn.execute(b"SELECT relkind FROM pg_class WHERE relname = 'llm_call_log'")
        assert kind.fetchone() == ("p",)
        # The migration's own functions are gone; the partitions' are there.
        left = conn.execute(
            b"SELECT proname FROM pg_proc WHERE proname LIKE 'llm_call_log%' ORDER BY 1"
        ).fetchall()
    assert [r[0] for r in left] == [
        "llm_call_log_add_partition",
        "llm_call_log_add_partitions",
        "llm_call_log_drop_partition",
        "llm_call_log_partitions",
    ]

    # Once its newest row is past the retention, the filled table goes like any week: one
    # drop, the calls of runs not yet ended (in flight, awaiting a person) kept.
    unended = (
        b"SELECT c.id FROM llm_call_log c JOIN pipeline_run r ON r.id = c.run_id"
        b" WHERE r.status IN ('queued', 'running', 'needs_review') ORDER BY 1"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        kept_ids = conn.execute(unended).fetchall()
        assert len(kept_ids) > 100, "the fill has calls of runs in flight and in review"
        cutover = conn.execute(
            b"SELECT to_at FROM llm_call_log_partitions()"
            b" WHERE partition = 'llm_call_log_legacy'::regclass"
        ).fetchone()
        assert cutover is not None
        dropped = conn.execute(
            b"SELECT * FROM llm_call_log_drop_partition(%s)", (cutover[0],)
        ).fetchall()
        assert dropped == [("llm_call_log_legacy", len(kept_ids))]
        assert conn.execute(unended).fetchall() == kept_ids
        assert scalar_of(conn, b"SELECT count(*) FROM llm_call_log") == len(kept_ids)
        assert scalar_of(conn, b"SELECT count(*) FROM llm_call_log_default") == len(kept_ids)


def scalar_of(conn: psycopg.Connection[Any], sql: bytes) -> int:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def test_an_answer_is_stored_compressed_and_memoised_as_it_was(db: Database) -> None:
    run = new_run(db, key="memo")
    key = CallKey(run.run_id, "extract_fields", 0, "section:1", 1, "acme", "m", "v1")
    request = {
        "provider": "default",
        "route_reason": None,
        "output_mode": "json_schema",
        "max_tokens": 100,
        "temperature": 0,
        "seed": None,
    }
    [check] = check_and_start_calls(
        db,
        [key],
        owner=None,
        requests=[request],
        estimated_costs_usd=[Decimal(0)],
        step_budget_usd=None,
    )
    assert check.memo is None and check.call_id is not None
    answer = {"fields": {"parties": [{"name": "Acme " * 40, "role": "Buyer"}]}, "big": 2**70}
    finish_calls(
        db,
        [
            CallFinish(check.call_id, "ok", 200, None, None, 10, 5, Decimal("0.01"), 100, answer),
        ],
        run_id=run.run_id,
    )
    stored = scalar(db, "SELECT octet_length(response_z) FROM llm_call_log WHERE response IS NULL")
    assert stored < len(str(answer)) / 3  # a repetitive answer shrinks
    [again] = check_and_start_calls(
        db,
        [key],
        owner=None,
        requests=[request],
        estimated_costs_usd=[Decimal(0)],
        step_budget_usd=None,
    )
    assert again.memo == answer and again.call_id is None  # not sent twice
    # A row written before answers were compressed is a memo all the same.
    with db.session() as s:
        s.conn.execute(
            b"UPDATE llm_call_log SET response = %s::jsonb, response_z = NULL",
            ('{"fields": {"old": 1}}',),
        )
    [old] = check_and_start_calls(
        db,
        [key],
        owner=None,
        requests=[request],
        estimated_costs_usd=[Decimal(0)],
        step_budget_usd=None,
    )
    assert old.memo == {"fields": {"old": 1}} and old.call_id is None
