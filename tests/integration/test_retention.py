"""Retention against real PostgreSQL: what is old and finished goes, in small batches; what
is recent, active or still owed (unpublished messages, pending webhooks) stays; pruning
never waits behind a lock."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from docpipe.settings import Settings
from docpipe.state import db as db_module
from docpipe.state.db import Database, load_queries
from docpipe.state.retention import prune_retention
from docpipe.worker.app import app, periodic_jobs
from docpipe_dev.processes import ManagedProcess
from tests.support.factories import new_run, scalar
from tests.support.processes import wait_until

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
        status,
        batch_id,
        callback_url,
        days_ago,
        status,
        days_ago,
        notified,
        run_id,
    )
    execute(
        db,
        "INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id,"
        " model, prompt_version, status, created_at)"
        " VALUES (%s, 'extract_sections', 0, 'c', 1, 'acme', 'gpt-4o-mini', 'v1', 'ok',"
        " now() - make_interval(days => %s))",
        run_id,
        days_ago,
    )
    return run_id


def aged_batch(db: Database, status: str, days_ago: int = OLD) -> str:
    row = db.one(
        "create_batch",
        id=uuid.uuid4(),
        tenant_id="acme",
        pipeline="document_extract:v1",
        runs_total=1,
        budget_usd=None,
        run_budget_usd=None,
        callback_url=None,
        deadline_at=None,
        idempotency_key=f"b-{status}-{days_ago}",
        request_hash="h",
        provider_batch=False,
    )
    assert row is not None
    execute(
        db,
        "UPDATE batch SET status = %s, finished_at = CASE WHEN %s <> 'running' THEN"
        " now() - make_interval(days => %s) END WHERE id = %s",
        status,
        status,
        days_ago,
        row["id"],
    )
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
    assert deleted == {
        "llm_call_log_partitions": 0,
        "llm_call_log": 1,
        "outbox": 0,
        "pipeline_run": 0,
        "batch": 0,
        "document": 0,
        "web_session": 0,
        "answered_request": 0,
    }
    assert runs_left(db) == {run_id}
    assert scalar(db, "SELECT steps_total FROM pipeline_run") == 4, "the run's summary stays"


def test_only_published_outbox_rows_are_pruned(db: Database) -> None:
    aged_run(db, "r")  # its first step's message: unpublished, 100 days old
    execute(
        db,
        "UPDATE outbox SET created_at = now() - interval '100 days',"
        " available_at = now() - interval '100 days'",
    )
    execute(
        db,
        "INSERT INTO outbox (topic, queue, published_at) VALUES"
        " ('webhook', 'q', now() - interval '8 days'),"
        " ('webhook', 'q', now() - interval '8 days'),"
        " ('webhook', 'q', now() - interval '6 days')",
    )
    assert prune(db)["outbox"] == 2
    assert scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 1
    assert scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL") == 1


def test_a_run_whose_webhook_is_still_owed_is_kept(db: Database) -> None:
    unnotified = aged_run(db, "unnotified", callback_url="https://x.test/h", notified=False)
    pending = aged_run(db, "pending", callback_url="https://x.test/h")
    delivered = aged_run(db, "delivered", callback_url="https://x.test/h")
    for run_id, status in ((pending, "pending"), (delivered, "delivered")):
        execute(
            db,
            "INSERT INTO webhook_delivery (run_id, tenant_id, url, payload, status)"
            " VALUES (%s, 'acme', 'https://x.test/h', '{}', %s)",
            run_id,
            status,
        )
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
    execute(
        db,
        "INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes,"
        " created_at) VALUES ('acme', %s, 'text', 'h', 4,"
        " now() - make_interval(days => %s))",
        document_id,
        days_ago,
    )


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


def test_a_document_goes_in_the_statement_that_prunes_its_last_run(db: Database) -> None:
    """Retention finds documents from the runs it deletes, so it never reads the documents
    that stay (a look for unused documents over every run grew with the history)."""
    runs = {}
    for document_id, run, ended_days_ago in (
        ("alone", "a", OLD),
        ("shared", "s-old", OLD),
        ("shared", "s-recent", RECENT),
        ("young", "y", OLD),
    ):
        if not documents_left(db) & {document_id}:
            aged_document(db, document_id, days_ago=RECENT if document_id == "young" else OLD)
        runs[run] = aged_run(db, run, days_ago=ended_days_ago)
        execute(
            db, "UPDATE pipeline_run SET document_id = %s WHERE id = %s", document_id, runs[run]
        )

    rows = db.all("prune_runs", days=90, document_days=90, limit=10)

    # The runs go with their calls (no foreign key: the statement deletes them).
    assert Counter(r["kind"] for r in rows) == {"pipeline_run": 3, "llm_call_log": 3, "document": 1}
    assert "alone" not in documents_left(db)
    # Still used by a recent run; younger than its own retention (prune_documents's, later).
    assert {"shared", "young"} <= documents_left(db)
    assert runs_left(db) == {runs["s-recent"]}


def test_a_weeks_calls_go_with_their_partition_but_those_of_runs_not_ended(
    db: Database,
) -> None:
    """The call log's partition of a week past the retention is dropped whole, once; the
    calls of runs in flight or awaiting a person move to the default partition."""
    week = scalar(db, "SELECT date_trunc('week', now() - interval '100 days', 'UTC')")
    execute(
        db,
        "SELECT llm_call_log_add_partition('llm_call_log_p_old',"
        " format('FOR VALUES FROM (%%L) TO (%%L)', %s::timestamptz,"
        " %s::timestamptz + interval '1 week'))",
        week,
        week,
    )
    ended = aged_run(db, "ended")  # its call, made 100 days ago, is in that partition
    waiting = aged_run(db, "waiting", status="needs_review")
    running = aged_run(db, "running", status="running")
    recent = aged_run(db, "recent", days_ago=RECENT)
    assert scalar(db, "SELECT count(*) FROM llm_call_log_p_old") == 3

    deleted = prune(db, retention_runs_days=0)  # the runs stay: only calls go

    assert deleted["llm_call_log_partitions"] == 1
    assert scalar(db, "SELECT to_regclass('llm_call_log_p_old')") is None
    with db.session() as s:
        rows = s.conn.execute(
            b"SELECT run_id::text, tableoid::regclass::text FROM llm_call_log"
        ).fetchall()
    kept = {r["run_id"]: r["tableoid"] for r in rows}
    assert set(kept) == {waiting, running, recent} and ended not in kept
    assert kept[waiting] == kept[running] == "llm_call_log_default"
    assert prune(db, retention_runs_days=0)["llm_call_log_partitions"] == 0


def test_weeks_ahead_have_their_call_log_partitions(db: Database) -> None:
    with db.session() as s:
        # None ahead, as after a long pause of beat.
        while s.conn.execute(b"SELECT * FROM llm_call_log_drop_partition('infinity')").fetchall():
            pass
        weeks = s.conn.execute(
            b"SELECT from_at FROM llm_call_log_partitions() WHERE from_at > now()"
        ).fetchall()
    assert weeks == []
    prune(db)
    with db.session() as s:
        ahead = s.conn.execute(
            b"SELECT count(*) AS n FROM llm_call_log_partitions()"
            b" WHERE to_at > now() + interval '2 weeks'"
        ).fetchone()
    assert ahead is not None and ahead["n"] == 1


def test_a_run_awaiting_review_is_kept_with_its_calls_and_document_however_old(
    db: Database,
) -> None:
    """A pause for a person is not an end: the run, its steps, its calls, its earlier
    decisions, its document and its batch stay until it is decided and then ages."""
    batch_id = aged_batch(db, "done")
    aged_document(db, "waits")
    waiting = aged_run(db, "waits", status="needs_review", batch_id=batch_id)
    execute(
        db,
        "UPDATE pipeline_run SET document_id = 'waits', review_step = 'extract_fields',"
        " review_reason = 'rule', review_since = now() - interval '100 days'"
        " WHERE id = %s",
        waiting,
    )
    execute(
        db,
        "INSERT INTO review_decision (run_id, tenant_id, step, revision, action,"
        " reviewer_name, retry_from, pipeline_hash, decided_at) VALUES (%s, 'acme',"
        " 'extract_fields', 0, 'retry', 'ann', 'extract_fields', 'h',"
        " now() - interval '101 days')",
        waiting,
    )
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
    execute(
        db,
        "UPDATE pipeline_run SET status = 'failed', review_step = NULL,"
        " review_reason = NULL, review_since = NULL WHERE id = %s",
        waiting,
    )
    assert prune(db)["pipeline_run"] == 1
    assert runs_left(db) == set() and "waits" not in documents_left(db)


def test_zero_days_keeps_everything(db: Database) -> None:
    aged_run(db, "ancient", days_ago=10_000)
    deleted = prune(
        db,
        retention_call_log_days=0,
        retention_outbox_days=0,
        retention_runs_days=0,
        retention_documents_days=0,
    )
    assert set(deleted.values()) == {0}
    assert len(runs_left(db)) == 1


def test_rows_are_deleted_in_small_batches_whatever_the_statistics_say(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch holds at most retention_batch_size rows of every table, also when the
    statistics say the tables are nearly empty (as autovacuum leaves a quiet database, or
    the tests before leave this one): with those, PostgreSQL once ran each batch's pick again
    for every row of the table, and one statement deleted all 11 outbox rows due."""

    def old_rows(i: int) -> None:
        """One of each kind of row that retention deletes."""
        aged_run(db, f"r{i}")  # and its call
        aged_batch(db, "done", days_ago=OLD + i)
        aged_document(db, f"d{i}")
        execute(
            db,
            "INSERT INTO outbox (topic, queue, published_at)"
            " VALUES ('webhook', 'q', now() - interval '30 days')",
        )
        execute(
            db,
            "INSERT INTO web_session (id_sha256, tenant_id, expires_at)"
            " VALUES (%s, 'acme', now() - interval '2 days')",
            f"s{i}",
        )
        execute(
            db,
            "INSERT INTO answered_request (tenant_id, request_sha256, call_id, created_at)"
            " VALUES ('acme', %s, %s, now() - interval '31 days')",
            f"a{i}",
            i,
        )

    old_rows(0)
    execute(db, "ANALYZE")  # statistics of a nearly empty database: one row a table
    for i in range(1, 7):
        old_rows(i)
    execute(
        db,
        "INSERT INTO outbox (topic, queue, published_at) SELECT 'webhook', 'q',"
        " now() - interval '30 days' FROM generate_series(1, 4)",
    )
    batches: list[tuple[str, int]] = []
    run_query = db_module.Session.all
    pruner = threading.get_ident()  # prune() runs here; a thread another test left does not

    def spy(self: db_module.Session, query: str, **params: Any) -> list[db_module.Row]:
        rows = run_query(self, query, **params)
        if threading.get_ident() == pruner:
            batches.append((query, len(rows)))
        return rows

    monkeypatch.setattr(db_module.Session, "all", spy)
    deleted = prune(db, retention_batch_size=3)

    assert deleted == {
        "llm_call_log_partitions": 0,
        "llm_call_log": 7,
        "outbox": 11,
        "pipeline_run": 7,
        "batch": 7,
        "document": 7,
        "web_session": 7,
        "answered_request": 7,
    }
    # Batch by batch, until one is short (the runs' calls are gone before their runs).
    seven, eleven = [3, 3, 1], [3, 3, 3, 2]
    assert batches == [("prune_call_log", n) for n in seven] + [
        ("prune_outbox", n) for n in eleven
    ] + [
        (query, n)
        for query in (
            "prune_runs",
            "prune_batches",
            "prune_documents",
            "prune_web_sessions",
            "prune_answered_requests",
        )
        for n in seven
    ]


def test_pruning_skips_rows_someone_holds(db: Database, database_url: str) -> None:
    held = aged_run(db, "held")
    free = aged_run(db, "free")
    with psycopg.connect(database_url) as holder:  # e.g. a worker in the middle of a claim
        holder.execute("SELECT 1 FROM pipeline_run WHERE id = %s FOR UPDATE", (held,))
        # The lock is held until prune() returns: a pass that waited for it would end at
        # the lock timeout having deleted no run (the next test shows such a pass).
        deleted = prune(db)
    assert deleted["pipeline_run"] == 1
    assert runs_left(db) == {held}
    assert free not in runs_left(db)


def test_pruning_gives_a_locked_table_up_quickly_and_goes_on(
    db: Database, database_url: str
) -> None:
    gone = aged_run(db, "gone")
    execute(
        db,
        "INSERT INTO outbox (topic, queue, published_at)"
        " VALUES ('webhook', 'q', now() - interval '30 days')",
    )
    with psycopg.connect(database_url) as holder:  # e.g. a long-running maintenance job
        holder.execute("LOCK TABLE outbox IN SHARE MODE")
        # Held until prune() returns: without its lock timeout, the pass would wait forever.
        deleted = prune(db)
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
    execute(
        db,
        "INSERT INTO outbox (topic, queue, published_at)"
        " VALUES ('webhook', 'q', now() - interval '30 days')",
    )
    start_worker(DOCPIPE_RETENTION_INTERVAL_S="1")
    start_beat(DOCPIPE_RETENTION_INTERVAL_S="1")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM outbox") == 0, timeout_s=30)

    def last_result() -> Any:
        return scalar(db, "SELECT last_result FROM periodic_job WHERE name = 'prune_retention'")

    # The job's result is recorded just after its deletions commit.
    wait_until(lambda: last_result() is not None, timeout_s=10)
    assert last_result()["outbox"] in (0, 1)


def test_the_answer_reuse_cache_goes_with_the_calls_it_names(db: Database) -> None:
    execute(
        db,
        "INSERT INTO answered_request (tenant_id, request_sha256, call_id, created_at) VALUES"
        " ('acme', 'old-1', 1, now() - interval '31 days'),"
        " ('acme', 'old-2', 2, now() - interval '40 days'),"
        " ('globex', 'recent', 3, now() - interval '29 days')",
    )
    assert prune(db, retention_call_log_days=30)["answered_request"] == 2
    assert scalar(db, "SELECT string_agg(request_sha256, ',') FROM answered_request") == "recent"
    assert prune(db, retention_call_log_days=0)["answered_request"] == 0, "0 days keeps it"


def executed_call_log_partitions(plan: dict[str, Any]) -> set[str]:
    """The call log's partitions a plan (EXPLAIN ANALYZE) read: those its run-time partition
    pruning did not leave out."""
    found = set()
    if plan.get("Relation Name", "").startswith("llm_call_log_") and plan.get("Actual Loops"):
        found.add(plan["Relation Name"])
    for child in plan.get("Plans", ()):
        found |= executed_call_log_partitions(child)
    return found


def test_pruning_runs_reads_only_the_call_log_weeks_that_can_hold_their_calls(
    db: Database, database_url: str
) -> None:
    """prune_runs costs its own work: the calls of the runs it deletes are looked for in the
    weeks from their start to a day past their end, not in every week the call log keeps."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        made = [
            r[0]
            for r in conn.execute(
                b"SELECT name FROM ("
                b" SELECT 'llm_call_log_p' || to_char(w AT TIME ZONE 'UTC', 'YYYYMMDD') AS name,"
                b"        llm_call_log_add_partition("
                b"            'llm_call_log_p' || to_char(w AT TIME ZONE 'UTC', 'YYYYMMDD'),"
                b"            format('FOR VALUES FROM (%L) TO (%L)', w, w + interval '1 week'))"
                b" FROM generate_series(date_trunc('week', now() - interval '130 days', 'UTC'),"
                b"                      date_trunc('week', now() - interval '30 days', 'UTC'),"
                b"                      interval '1 week') w"
                b" WHERE NOT EXISTS (SELECT 1 FROM llm_call_log_partitions() p"
                b"                   WHERE p.from_at < w + interval '1 week' AND p.to_at > w)"
                b") made"
            )
        ]
    try:
        old = aged_run(db, "old")  # ended, and its call made, 100 days ago
        aged_run(db, "forty-days", days_ago=40)  # within the runs' retention
        week_of = (
            "SELECT 'llm_call_log_p' || to_char(date_trunc('week', now() - make_interval("
            "days => %s), 'UTC') AT TIME ZONE 'UTC', 'YYYYMMDD')"
        )
        its_weeks = {scalar(db, week_of, OLD), scalar(db, week_of, OLD - 1)}
        assert len(made) >= 14 and its_weeks <= set(made)

        with psycopg.connect(database_url) as conn:
            explained = conn.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {load_queries()['prune_runs']}".encode(),
                {"days": 90, "document_days": 90, "limit": 10},
            ).fetchone()
            conn.rollback()
        assert explained is not None
        read = executed_call_log_partitions(explained[0][0]["Plan"])
        assert scalar(db, week_of, OLD) in read
        assert read <= its_weeks, f"read {sorted(read - its_weeks)} too"

        rows = db.all("prune_runs", days=90, document_days=90, limit=10)
        assert Counter(r["kind"] for r in rows) == {"pipeline_run": 1, "llm_call_log": 1}
        assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE run_id = %s", old) == 0
        assert scalar(db, "SELECT count(*) FROM llm_call_log") == 1
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for name in made:
                conn.execute(f"DROP TABLE IF EXISTS {name}".encode())
