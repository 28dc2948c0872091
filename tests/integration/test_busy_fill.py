"""bench.busy fills a migrated database with a busy deployment's rows, consistent with what
docpipe itself would have written: the benchmarks of growth (and the scan guard) read it."""

from __future__ import annotations

import psycopg
import pytest

from bench.busy import Shape, fill
from docpipe.state.migrate import apply_migrations
from tests.support.servers import create_database

# Slow: a fill of a busy database; make test-fast leaves it out.
pytestmark = pytest.mark.slow

SHAPE = Shape(runs=3_000, waiting=400, in_flight=8, interactive_in_flight=8, review_backlog=20)


def test_a_fill_holds_the_shape_it_was_asked_for(postgres_admin_url: str) -> None:
    url = create_database(postgres_admin_url, "docpipe_busy")
    apply_migrations(url)
    filled = fill(url, SHAPE)
    with psycopg.connect(url) as conn:

        def scalar(sql: str) -> int:
            row = conn.execute(sql.encode()).fetchone()
            assert row is not None
            return int(row[0])

        assert filled.runs == scalar("SELECT count(*) FROM pipeline_run") == 3_000
        # Four steps a run, a document a run, what is in flight as the shape says.
        assert scalar("SELECT count(*) FROM pipeline_step_result") == 4 * 3_000
        assert scalar("SELECT count(DISTINCT (tenant_id, document_id)) FROM pipeline_run") == 3_000
        assert scalar(
            "SELECT count(*) FROM pipeline_run WHERE lane = 'batch' AND status = 'queued'"
            " AND admitted_at IS NULL"
        ) == round(400 * 0.75) + round(400 * 0.15) + round(400 * 0.10)
        assert scalar(
            "SELECT count(*) FROM pipeline_run WHERE lane = 'batch' AND status = 'running'"
        ) == round(8 * 0.75) + round(8 * 0.15) + round(8 * 0.10)
        assert scalar("SELECT count(*) FROM batch WHERE status = 'running'") == 3
        # Every ended run's steps agree with it: a done run's four steps are done, with
        # outputs; a run awaiting a person has its review and its failed step.
        assert (
            scalar(
                "SELECT count(*) FROM pipeline_run r WHERE r.status = 'done' AND 4 <> (SELECT"
                " count(*) FROM pipeline_step_result s WHERE s.run_id = r.id AND s.status = 'done'"
                " AND s.output IS NOT NULL)"
            )
            == 0
        )
        assert (
            scalar(
                "SELECT count(*) FROM pipeline_run r JOIN pipeline_step_result s"
                " ON s.run_id = r.id AND s.step = r.review_step"
                " WHERE r.status = 'needs_review' AND s.status = 'failed' AND r.review_since"
                " IS NOT NULL"
            )
            == scalar("SELECT count(*) FROM pipeline_run WHERE status = 'needs_review'")
            > 0
        )
        # About 14 calls a run that got through its steps.
        calls = scalar("SELECT count(*) FROM llm_call_log")
        done = scalar("SELECT count(*) FROM pipeline_run WHERE status = 'done'")
        assert 12 * done < calls < 16 * 3_000
        assert (
            scalar("SELECT count(*) FROM pipeline_run WHERE tenant_id = 'tenant-00'")
            > scalar("SELECT count(*) FROM pipeline_run") / 4
        )
        assert set(filled.api_keys) == {"tenant-00", "tenant-01", "tenant-07"}
    # The same seed gives the same rows.
    again = create_database(postgres_admin_url, "docpipe_busy")
    apply_migrations(again)
    fill(again, SHAPE)
    digest = "SELECT md5(string_agg(id::text || status, ',' ORDER BY id)) FROM pipeline_run"
    with psycopg.connect(url) as a, psycopg.connect(again) as b:
        assert a.execute(digest.encode()).fetchone() == b.execute(digest.encode()).fetchone()
