"""Retention against real PostgreSQL: what is old and finished goes, in small batches; what
is recent, active or still owed (unpublished messages, pending webhooks) stays; pruning
never waits behind a lock."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from docpipe.settings import Settings
from docpipe.state import db as db_module
from docpipe.state.db import Database
from docpipe.state.retention import LOCK_TIMEOUT_MS, prune_retention
from docpipe.worker.app import app, periodic_jobs
from docpipe_dev.processes import ManagedProcess
from tests.factories import new_run, scalar
from tests.processes import wait_until

OLD, RECENT = 100, 1  # days ago; the default retentions are 30 (calls), 7 (outbox), 90 (runs)


def execute(db: Database, sql: str, *params: Any) -> None:
    with db.session() as s:
        s.conn.execute(sql.encode(), params)


def aged_run(
    db: Database,
    key: str,
    *,
    status: str = "done",
    days_ago: int = OLD,
    batch_id: str | None = None,
    callback_url: str | None = None,
    notified: bool = True,
) -> str:
    """A run created (and, unless active, ended) ``days_ago`` days ago, with one call."""
    run_id = new_run(db, key=key).run_id
    execute(
        db,
        "UPDATE pipeline_run SET status = %s, batch_id = %s, callback_url = %s,"
        " created_at = now() - make_interval(days => %s),"
        " finished_at = CASE WHEN %s NOT IN ('queued', 'running')"
        "                    THEN now() - make_interval(days => %s) END,"
        " notified_at = CASE WHEN %s THEN now() END WHERE id = %s",
        status, batch_id, callback_url, days_ago, status, days_ago, notified, run_id,
    )  # fmt: skip
    execute(
        db,
        "INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id,"
        " model, prompt_version, status, created_at)"
        " VALUES (%s, 'extract_sections', 0, 'c', 1, 'acme', 'gpt-4o-mini', 'v1', 'ok',"
        " now() - make_interval(days => %s))",
        run_id, days_ago,
    )  # fmt: skip
    return run_id


def aged_batch(db: Database, status: str, days_ago: int = OLD) -> str:
    row = db.one("create_batch", id=uuid.uuid4(), tenant_id="acme",
                 pipeline="document_extract:v1", runs_total=1, budget_usd=None,
                 run_budget_usd=None, callback_url=None, deadline_at=None,
                 idempotency_key=f"b-{status}-{days_ago}", request_hash="h")  # fmt: skip
    assert row is not None
    execute(db, "UPDATE batch SET status = %s, finished_at = CASE WHEN %s <> 'running' THEN"
                " now() - make_interval(days => %s) END WHERE id = %s",
            status, status, days_ago, row["id"])  # fmt: skip
    return str(row["id"])


def runs_left(db: Database) -> set[str]:
    with db.session() as s:
        return {str(r["id"]) for r in s.conn.execute(b"SELECT id FROM pipeline_run").fetchall()}


def prune(db: Database, **settings: Any) -> dict[str, int]:
    return prune_retention(db, Settings(**settings), time_budget_s=30)


def test_old_ended_runs_go_with_their_steps_and_calls_and_active_ones_stay(db: Database) -> None:
    old_done = aged_run(db, "old-done")
    old_failed = aged_run(db, "old-failed", status="failed")
    recent_done = aged_run(db, "recent-done", days_ago=RECENT)
    old_running = aged_run(db, "old-running", status="running")
    old_queued = aged_run(db, "old-queued", status="queued")

    deleted = prune(db)

    assert runs_left(db) == {recent_done, old_running, old_queued}
    assert deleted["pipeline_run"] == 2
    for gone in (old_done, old_failed):
        assert scalar(db, "SELECT count(*) FROM pipeline_step_result WHERE run_id = %s", gone) == 0
    assert scalar(db, "SELECT count(*) FROM pipeline_step_result") == 12  # 3 runs x 4 steps
    # Calls: the old ones of ended runs went first; active runs keep even 100-day-old calls.
    assert deleted["llm_call_log"] == 2
    with db.session() as s:
        kept = s.conn.execute(b"SELECT run_id::text AS r FROM llm_call_log").fetchall()
    assert {r["r"] for r in kept} == {recent_done, old_running, old_queued}


def test_calls_are_pruned_sooner_than_their_runs(db: Database) -> None:
    run_id = aged_run(db, "forty-days", days_ago=40)  # past the 30 days of calls, not of runs
    deleted = prune(db)
    assert deleted == {"llm_call_log": 1, "outbox": 0, "pipeline_run": 0, "batch": 0,
                       "document": 0}  # fmt: skip
    assert runs_left(db) == {run_id}
    assert scalar(db, "SELECT steps_total FROM pipeline_run") == 4, "the run's summary stays"


def test_only_published_outbox_rows_are_pruned(db: Database) -> None:
    aged_run(db, "r")  # its first step's message: unpublished, 100 days old
    execute(db, "UPDATE outbox SET created_at = now() - interval '100 days',"
                " available_at = now() - interval '100 days'")  # fmt: skip
    execute(db, "INSERT INTO outbox (topic, queue, published_at) VALUES"
                " ('webhook', 'q', now() - interval '8 days'),"
                " ('webhook', 'q', now() - interval '8 days'),"
                " ('webhook', 'q', now() - interval '6 days')")  # fmt: skip
    assert prune(db)["outbox"] == 2
    assert scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 1
    assert scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL") == 1


def test_a_run_whose_webhook_is_still_owed_is_kept(db: Database) -> None:
    unnotified = aged_run(db, "unnotified", callback_url="https://x.test/h", notified=False)
    pending = aged_run(db, "pending", callback_url="https://x.test/h")
    delivered = aged_run(db, "delivered", callback_url="https://x.test/h")
    for run_id, status in ((pending, "pending"), (delivered, "delivered")):
        execute(db, "INSERT INTO webhook_delivery (run_id, tenant_id, url, payload, status)"
                    " VALUES (%s, 'acme', 'https://x.test/h', '{}', %s)",
                    run_id, status)  # fmt: skip
    prune(db)
    assert runs_left(db) == {unnotified, pending}
    assert scalar(db, "SELECT count(*) FROM webhook_delivery") == 1


def test_batch_runs_go_only_with_their_ended_batch(db: Database) -> None:
    ended = aged_batch(db, "done")
    running = aged_batch(db, "running")
    of_ended = aged_run(db, "of-ended", batch_id=ended)
    of_running = aged_run(db, "of-running", batch_id=running)
    deleted = prune(db)
    assert runs_left(db) == {of_running}
    assert (deleted["pipeline_run"], deleted["batch"]) == (1, 1)
    assert scalar(db, "SELECT id::text FROM batch") == running
    assert of_ended not in runs_left(db)


def aged_document(db: Database, document_id: str, days_ago: int = OLD) -> None:
    execute(db, "INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes,"
                " created_at) VALUES ('acme', %s, 'text', 'h', 4,"
                " now() - make_interval(days => %s))", document_id, days_ago)  # fmt: skip


def documents_left(db: Database) -> set[str]:
    with db.session() as s:
        return {r["id"] for r in s.conn.execute(b"SELECT id FROM document").fetchall()}


def test_old_documents_go_once_no_run_uses_them(db: Database) -> None:
    aged_document(db, "old-unused")
    aged_document(db, "recent-unused", days_ago=RECENT)
    for document_id, status, ended_days_ago in (
        ("old-of-old-run", "done", OLD),  # its run goes in the same pass, then the document
        ("old-of-recent-run", "done", RECENT),
        ("old-of-active-run", "running", OLD),
    ):
        aged_document(db, document_id)
        run_id = aged_run(db, f"run-{document_id}", status=status, days_ago=ended_days_ago)
        execute(db, "UPDATE pipeline_run SET document_id = %s WHERE id = %s", document_id, run_id)

    deleted = prune(db)

    # doc-1: new_run's own, stored just now.
    kept = {"recent-unused", "old-of-recent-run", "old-of-active-run", "doc-1"}
    assert documents_left(db) == kept
    assert deleted["document"] == 2
    assert prune(db)["document"] == 0


def test_a_run_awaiting_review_is_kept_with_its_calls_and_document_however_old(
    db: Database,
) -> None:
    """A pause for a person is not an end: the run, its steps, its calls, its earlier
    decisions, its document and its batch stay until it is decided and then ages."""
    batch_id = aged_batch(db, "done")
    aged_document(db, "waits")
    waiting = aged_run(db, "waits", status="needs_review", batch_id=batch_id)
    execute(db, "UPDATE pipeline_run SET document_id = 'waits', review_step = 'extract_fields',"
                " review_reason = 'rule', review_since = now() - interval '100 days'"
                " WHERE id = %s", waiting)  # fmt: skip
    execute(db, "INSERT INTO review_decision (run_id, tenant_id, step, revision, action,"
                " reviewer_name, retry_from, pipeline_hash, decided_at) VALUES (%s, 'acme',"
                " 'extract_fields', 0, 'retry', 'ann', 'extract_fields', 'h',"
                " now() - interval '101 days')", waiting)  # fmt: skip
    aged_document(db, "done")
    done = aged_run(db, "done", batch_id=batch_id)
    execute(db, "UPDATE pipeline_run SET document_id = 'done' WHERE id = %s", done)

    deleted = prune(db)

    assert runs_left(db) == {waiting}
    assert (deleted["pipeline_run"], deleted["llm_call_log"], deleted["batch"]) == (1, 1, 0)
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE run_id = %s", waiting) == 1
    assert scalar(db, "SELECT count(*) FROM pipeline_step_result WHERE run_id = %s", waiting) == 4
    assert scalar(db, "SELECT count(*) FROM review_decision WHERE run_id = %s", waiting) == 1
    assert "waits" in documents_left(db) and "done" not in documents_left(db)
    assert scalar(db, "SELECT id::text FROM batch") == batch_id

    # Decided (rejected) long ago, it is finished business like any other.
    execute(db, "UPDATE pipeline_run SET status = 'failed', review_step = NULL,"
                " review_reason = NULL, review_since = NULL WHERE id = %s", waiting)  # fmt: skip
    assert prune(db)["pipeline_run"] == 1
    assert runs_left(db) == set() and "waits" not in documents_left(db)


def test_zero_days_keeps_everything(db: Database) -> None:
    aged_run(db, "ancient", days_ago=10_000)
    deleted = prune(db, retention_call_log_days=0, retention_outbox_days=0, retention_runs_days=0,
                    retention_documents_days=0)  # fmt: skip
    assert set(deleted.values()) == {0}
    assert len(runs_left(db)) == 1


def test_rows_are_deleted_in_small_batches(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(7):
        aged_run(db, f"r{i}")
    execute(db, "INSERT INTO outbox (topic, queue, published_at) SELECT 'webhook', 'q',"
                " now() - interval '30 days' FROM generate_series(1, 11)")  # fmt: skip
    batches: list[tuple[str, int]] = []
    execute_query = db_module.Session.execute

    def spy(self: db_module.Session, query: str, **params: Any) -> int:
        count = execute_query(self, query, **params)
        batches.append((query, count))
        return count

    monkeypatch.setattr(db_module.Session, "execute", spy)
    deleted = prune(db, retention_batch_size=3)
    assert deleted == {"llm_call_log": 7, "outbox": 11, "pipeline_run": 7, "batch": 0,
                       "document": 0}  # fmt: skip
    assert all(count <= 3 for _, count in batches)
    assert [c for q, c in batches if q == "prune_outbox"] == [3, 3, 3, 2]


def test_pruning_skips_rows_someone_holds(db: Database, database_url: str) -> None:
    held = aged_run(db, "held")
    free = aged_run(db, "free")
    with psycopg.connect(database_url) as holder:  # e.g. a worker in the middle of a claim
        holder.execute("SELECT 1 FROM pipeline_run WHERE id = %s FOR UPDATE", (held,))
        started = time.monotonic()
        deleted = prune(db)
        elapsed = time.monotonic() - started
    assert elapsed < LOCK_TIMEOUT_MS / 1000, "pruning waited for a row lock"
    assert deleted["pipeline_run"] == 1
    assert runs_left(db) == {held}
    assert free not in runs_left(db)


def test_pruning_gives_a_locked_table_up_quickly_and_goes_on(
    db: Database, database_url: str
) -> None:
    gone = aged_run(db, "gone")
    execute(db, "INSERT INTO outbox (topic, queue, published_at)"
                " VALUES ('webhook', 'q', now() - interval '30 days')")  # fmt: skip
    with psycopg.connect(database_url) as holder:  # e.g. a long-running maintenance job
        holder.execute("LOCK TABLE outbox IN SHARE MODE")
        started = time.monotonic()
        deleted = prune(db)
        elapsed = time.monotonic() - started
    assert elapsed < 3 * LOCK_TIMEOUT_MS / 1000, "pruning queued behind the table lock"
    assert deleted["outbox"] == 0, "left for the next pass"
    assert gone not in runs_left(db), "the other tables were pruned all the same"
    assert prune(db)["outbox"] == 1, "the next pass continues"


def test_beat_runs_the_retention_job(
    db: Database,
    broker: object,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    assert "docpipe.periodic.prune_retention" in periodic_jobs(Settings())
    assert "docpipe.periodic.prune_retention" in app.tasks
    execute(db, "INSERT INTO outbox (topic, queue, published_at)"
                " VALUES ('webhook', 'q', now() - interval '30 days')")  # fmt: skip
    start_worker(DOCPIPE_RETENTION_INTERVAL_S="1")
    start_beat(DOCPIPE_RETENTION_INTERVAL_S="1")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM outbox") == 0, timeout_s=30)

    def last_result() -> Any:
        return scalar(db, "SELECT last_result FROM periodic_job WHERE name = 'prune_retention'")

    # The job's result is recorded just after its deletions commit.
    wait_until(lambda: last_result() is not None, timeout_s=10)
    assert last_result()["outbox"] in (0, 1)
