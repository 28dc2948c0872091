"""Batches: submission through the API, admission, cancel, budgets and webhooks, with real
PostgreSQL, Redis, workers and beat."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from standardwebhooks import Webhook

from docpipe.broker.queues import RUN_ID_HEADER, sub_lists
from docpipe.pipelines.catalog import catalog
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.settings import Settings
from docpipe.state.admission import admit_batch_runs
from docpipe.state.batches import BatchDocument, create_batch, stop_batch
from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until
from tests.support.receivers import recording_receiver

CONTRACTS = sample_contracts(120)
SECRETS_KEY = Fernet.generate_key().decode()


def batch_body(count: int, prefix: str = "c", **options: Any) -> dict[str, Any]:
    documents = [{"id": f"{prefix}-{i}", "text": CONTRACTS[i % 120].text} for i in range(count)]
    return {"documents": documents, **options}


def submit(client: TestClient, body: dict[str, Any], key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    response = client.post("/batches", json=body, headers=headers)
    assert response.status_code == 202, response.text
    return response.json()


def batch_messages(broker: redis.Redis, run_ids: set[str]) -> int:
    """Messages of these runs still in Redis: waiting in a queue or unacknowledged."""
    found = 0
    for queue in ("llm_batch", "llm_interactive"):
        for name in sub_lists(queue):
            found += sum(
                json.loads(raw)["headers"].get(RUN_ID_HEADER) in run_ids
                for raw in broker.lrange(name, 0, -1)
            )
    for raw in broker.hvals("unacked"):
        message = json.loads(raw)[0]
        found += message["headers"].get(RUN_ID_HEADER) in run_ids
    return found


def run_ids_of(db: Database, batch_id: str) -> set[str]:
    with db.session() as s:
        rows = s.conn.execute(
            b"SELECT id::text AS id FROM pipeline_run WHERE batch_id = %s", (batch_id,)
        ).fetchall()
    return {r["id"] for r in rows}


# --- submission (API, no workers) ---------------------------------------------------------


def test_a_batch_of_120_documents_is_accepted_at_once_and_fills_only_the_window(
    make_api_client: Callable[..., TestClient], db: Database, broker: redis.Redis
) -> None:
    client = make_api_client(batch_admission_window=8)
    accepted = submit(client, batch_body(120), key="b-1")
    assert (accepted["runs_total"], accepted["created"]) == (120, True)
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE lane = 'batch'") == 120
    assert scalar(db, "SELECT count(*) FROM pipeline_step_result") == 480  # 4 steps each
    # The window's free slots start now, without waiting for beat; the rest wait here.
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE admitted_at IS NOT NULL") == 8
    assert broker.llen("llm_batch") == 8, "only the admitted runs are enqueued"

    status = client.get(f"/batches/{accepted['batch_id']}").json()
    assert status["runs_by_status"] == {"queued": 120}
    # Each text document's extract_text is done as its run is created.
    assert (status["waiting_admission"], status["steps_done"], status["steps_total"]) == (
        112,
        120,
        480,
    )
    assert status["status"] == "running"
    again = submit(client, batch_body(120), key="b-1")
    assert again["created"] is False
    assert broker.llen("llm_batch") == 8, "a repeated request admits nothing more"


def test_the_same_key_returns_the_same_batch_and_another_body_conflicts(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    first = submit(client, batch_body(3), key="k")
    again = submit(client, batch_body(3), key="k")
    assert (again["batch_id"], again["created"]) == (first["batch_id"], False)
    other = client.post("/batches", json=batch_body(4), headers={"Idempotency-Key": "k"})
    assert other.status_code == 409
    assert scalar(db, "SELECT count(*) FROM batch") == 1


def test_a_batch_of_documents_without_ids_replays_under_its_key(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    """Their ids are generated; the replay must not see other ids as another request."""
    client = make_api_client()
    body = {"documents": [{"text": CONTRACTS[0].text}, {"text": CONTRACTS[1].text}]}
    first = submit(client, body, key="no-ids")
    again = submit(client, body, key="no-ids")
    assert (again["batch_id"], again["created"]) == (first["batch_id"], False)
    assert scalar(db, "SELECT count(*) FROM document") == 2, "stored once"
    other = {"documents": [{"text": CONTRACTS[0].text}, {"text": CONTRACTS[2].text}]}
    conflict = client.post("/batches", json=other, headers={"Idempotency-Key": "no-ids"})
    assert conflict.status_code == 409
    assert scalar(db, "SELECT count(*) FROM batch") == 1


def test_a_document_named_twice_runs_twice_and_other_text_under_its_id_conflicts(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    twice = {"documents": [{"id": "0", "text": "TEXT"}, {"id": "0"}, {"id": "0", "text": "TEXT"}]}
    assert submit(client, twice)["runs_total"] == 3
    assert scalar(db, "SELECT count(*) FROM document") == 1
    assert scalar(db, "SELECT count(DISTINCT id) FROM pipeline_run WHERE document_id = '0'") == 3
    other = {"documents": [{"id": "1", "text": "one"}, {"id": "1", "text": "another"}]}
    conflict = client.post("/batches", json=other)
    assert conflict.status_code == 409
    assert "'1'" in conflict.json()["detail"]
    assert scalar(db, "SELECT count(*) FROM batch") == 1, "the refused batch left nothing"


def test_documents_stored_earlier_can_be_named_by_id(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    client.put("/documents/stored", content=b"TEXT", headers={"Content-Type": "text/plain"})
    accepted = submit(client, {"documents": [{"id": "stored"}, {"text": "inline"}]})
    assert accepted["runs_total"] == 2
    missing = client.post("/batches", json={"documents": [{"id": "nope"}]})
    assert missing.status_code == 404
    assert "nope" in missing.json()["detail"]
    changed = client.post("/batches", json={"documents": [{"id": "stored", "text": "other"}]})
    assert changed.status_code == 409
    assert scalar(db, "SELECT count(*) FROM batch") == 1, "a refused batch leaves nothing"


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({"documents": []}, 422, "documents"),
        ({"documents": [{}]}, 422, "text, its stored id, or both"),
        ({"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, 409, "given twice"),
        ({"documents": [{"id": "../x", "text": "x"}]}, 422, "not a valid id"),
        ({"documents": [{"text": "x"}], "colour": "red"}, 422, "colour"),
        ({"documents": [{"text": "x"}], "budget_usd": -1}, 422, "budget_usd"),
        ({"documents": [{"text": "x"}], "pipeline": "nope:v9"}, 422, "unknown pipeline"),
        ({"documents": [{"text": "x"}] * 6}, 422, "the limit is 5"),
    ],
)
def test_bad_batches_get_a_clear_error_and_change_nothing(
    make_api_client: Callable[..., TestClient],
    db: Database,
    body: dict[str, Any],
    status: int,
    detail: str,
) -> None:
    client = make_api_client(max_batch_documents=5)
    response = client.post("/batches", json=body)
    assert response.status_code == status, response.text
    assert detail in response.json()["detail"]
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 0


def test_oversized_and_non_json_batches_are_refused(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client(max_batch_bytes=1000)
    assert client.post("/batches", json=batch_body(1)).status_code == 413
    text = client.post("/batches", content=b"x", headers={"Content-Type": "text/plain"})
    assert text.status_code == 415
    assert client.get("/batches/not-a-uuid").status_code == 404
    assert client.get("/batches/00000000-0000-0000-0000-000000000000").status_code == 404


# --- admission (PostgreSQL only) ----------------------------------------------------------


def admitted(db: Database, tenant: str | None = None) -> int:
    return int(
        scalar(
            db,
            "SELECT count(*) FROM pipeline_run WHERE admitted_at IS NOT NULL"
            " AND (%s::text IS NULL OR tenant_id = %s)",
            tenant,
            tenant,
        )
    )


def finish_admitted(db: Database, tenant: str, count: int) -> None:
    with db.session() as s:
        s.conn.execute(
            b"UPDATE pipeline_run SET status = 'done' WHERE id IN (SELECT id FROM pipeline_run"
            b" WHERE tenant_id = %s AND admitted_at IS NOT NULL AND status = 'queued' LIMIT %s)",
            (tenant, count),
        )


def test_admission_fills_only_the_window_and_enqueues_first_steps(
    db: Database, settings: Settings
) -> None:
    create(db, "default", 30, "b")
    window = settings.model_copy(update={"batch_admission_window": 8})
    assert len(admit_batch_runs(db, window)) == 8
    assert admit_batch_runs(db, window) == (), "the window is full"
    finish_admitted(db, "default", 3)
    assert len(admit_batch_runs(db, window)) == 3
    assert admitted(db) == 11
    assert scalar(db, "SELECT count(DISTINCT step) FROM outbox") == 1
    assert scalar(db, "SELECT min(queue) FROM outbox") == "llm_batch"


def create(db: Database, tenant: str, count: int, prefix: str) -> None:
    documents = [BatchDocument(f"{prefix}-{i}", CONTRACTS[i].text) for i in range(count)]
    with db.transaction() as tx:
        create_batch(
            tx,
            tenant_id=tenant,
            pipeline=DOCUMENT_EXTRACT,
            documents=documents,
            idempotency_key=prefix,
            request={"prefix": prefix},
        )


def test_admission_serves_the_least_served_tenant_first(db: Database, settings: Settings) -> None:
    window = settings.model_copy(update={"batch_admission_window": 8})
    create(db, "a", 100, "a")
    admit_batch_runs(db, window)
    create(db, "b", 10, "b")  # tenant b arrives later with 10 documents
    finish_admitted(db, "a", 6)
    admit_batch_runs(db, window)
    # Tenant a was served 8 runs already; the newcomer gets every freed slot.
    assert admitted(db, "b") == 6
    finish_admitted(db, "a", 2)
    finish_admitted(db, "b", 6)
    admit_batch_runs(db, window)
    assert admitted(db, "b") == 10, "the rest of the small batch goes first"
    assert admitted(db, "a") == 12


def test_admission_alternates_between_batches_of_one_tenant(
    db: Database, settings: Settings
) -> None:
    window = settings.model_copy(update={"batch_admission_window": 6})
    create(db, "a", 20, "first")
    create(db, "a", 20, "second")
    admit_batch_runs(db, window)
    with db.session() as s:
        counts = [
            r["n"]
            for r in s.conn.execute(
                b"SELECT count(*) AS n FROM pipeline_run WHERE admitted_at IS NOT NULL"
                b" GROUP BY batch_id"
            ).fetchall()
        ]
    assert sorted(counts) == [3, 3]


def test_admission_takes_the_head_of_a_big_backlog_and_single_batch_lane_runs(
    db: Database, settings: Settings
) -> None:
    window = settings.model_copy(update={"batch_admission_window": 4})
    create(db, "a", 60, "big")
    single = new_run(db, tenant_id="b", lane="batch")
    admit_batch_runs(db, window)
    # Tenant b's one run (no batch) is a queue of its own, served like a batch would be.
    assert (
        scalar(db, "SELECT admitted_at IS NOT NULL FROM pipeline_run WHERE id = %s", single.run_id)
        is True
    )
    # The big batch goes in creation order: its first runs, not any 3 of the 60.
    first_three = scalar(
        db,
        "SELECT array_agg(id::text ORDER BY id::text) FROM (SELECT id"
        " FROM pipeline_run WHERE batch_id IS NOT NULL"
        " ORDER BY created_at, id LIMIT 3) f",
    )
    taken = scalar(
        db,
        "SELECT array_agg(id::text ORDER BY id::text) FROM pipeline_run"
        " WHERE batch_id IS NOT NULL AND admitted_at IS NOT NULL",
    )
    assert taken == first_three


# --- with workers -------------------------------------------------------------------------


@pytest.fixture
def batch_stack(
    start_worker: Callable[..., ManagedProcess], start_beat: Callable[..., ManagedProcess]
) -> Callable[..., None]:
    def start(window: int = 4, concurrency: int = 2, **env: str) -> None:
        settings = {"DOCPIPE_BATCH_ADMISSION_WINDOW": str(window), **env}
        start_worker("batch", concurrency=concurrency, **settings)
        start_beat(**settings)

    return start


def test_a_batch_runs_through_the_batch_lane_with_a_short_queue(
    make_api_client: Callable[..., TestClient],
    db: Database,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    batch_stack: Callable[..., None],
) -> None:
    client = make_api_client()
    batch_id = submit(client, batch_body(12))["batch_id"]
    batch_stack(window=4)
    longest = 0
    while client.get(f"/batches/{batch_id}").json()["status"] == "running":
        longest = max(longest, broker.llen("llm_batch"))
        time.sleep(0.05)
    status = client.get(f"/batches/{batch_id}").json()
    assert status["status"] == "done"
    assert status["runs_by_status"] == {"done": 12}
    assert (status["steps_done"], status["steps_total"]) == (48, 48)
    spent = scalar(db, "SELECT sum(cost_usd) FROM llm_call_log")
    assert status["cost_so_far_usd"] == pytest.approx(float(spent))
    assert longest <= 4, "admission keeps the Redis queue within the window"


def test_cancelling_a_running_batch_sends_no_new_call_and_leaves_nothing_queued(
    make_api_client: Callable[..., TestClient],
    db: Database,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    batch_stack: Callable[..., None],
) -> None:
    fake_llm.configure(latency_ms=[100, 100])
    client = make_api_client()
    batch_id = submit(client, batch_body(60))["batch_id"]
    batch_stack(window=6, concurrency=3)
    wait_until(lambda: scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'done'") >= 3)

    cancelled = client.post(f"/batches/{batch_id}/cancel")
    cancelled_at = scalar(db, "SELECT now()")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    calls_at_cancel = scalar(db, "SELECT count(*) FROM llm_call_log")
    time.sleep(3)  # in-flight calls finish; nothing else may start
    late = scalar(db, "SELECT count(*) FROM llm_call_log WHERE created_at > %s", cancelled_at)
    assert late == 0, "no provider call was sent after the cancel"
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'sent'") == 0
    assert scalar(db, "SELECT count(*) FROM llm_call_log") == calls_at_cancel
    assert batch_messages(broker, run_ids_of(db, batch_id)) == 0
    statuses = client.get(f"/batches/{batch_id}").json()["runs_by_status"]
    assert set(statuses) <= {"done", "cancelled"}
    assert client.post(f"/batches/{batch_id}/cancel").status_code == 409


def test_a_big_batch_is_cancelled_while_its_workers_keep_paying_for_calls(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    batch_stack: Callable[..., None],
) -> None:
    # Every finished call adds its cost to its run and then to the batch. A cancel that took
    # the batch first and then its thousands of runs met a worker holding a run and waiting
    # for the batch, gave up after its lock timeout every time, and answered 503.
    fake_llm.configure(latency_ms=[0, 0])
    client = make_api_client()
    # A field to find: a contract without any would pause for a person (poor_extraction).
    short = "SERVICES AGREEMENT\nThe parties agree.\n1. TERM\nThe initial term is 12 months."
    documents = [{"id": f"big-{i}", "text": short} for i in range(3000)]
    batch_id = submit(client, {"documents": documents})["batch_id"]
    batch_stack(window=8, concurrency=4)
    wait_until(lambda: scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'ok'") >= 100)

    cancelled = client.post(f"/batches/{batch_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    active = scalar(
        db,
        "SELECT count(*) FROM pipeline_run WHERE batch_id = %s AND status IN ('queued', 'running')",
        batch_id,
    )
    assert active == 0
    pending = scalar(
        db,
        "SELECT count(*) FROM pipeline_step_result s JOIN pipeline_run r"
        " ON r.id = s.run_id WHERE r.batch_id = %s AND s.status = 'pending'",
        batch_id,
    )
    assert pending == 0


def test_a_cancel_that_cannot_lock_a_run_changes_nothing_and_says_retry(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    batch_id = submit(client, batch_body(3))["batch_id"]
    with db.transaction() as held:  # another writer keeps one run locked past every retry
        held.conn.execute(
            b"SELECT 1 FROM pipeline_run WHERE batch_id = %s LIMIT 1 FOR UPDATE", (batch_id,)
        )
        busy = client.post(f"/batches/{batch_id}/cancel")
    assert busy.status_code == 503
    assert "nothing changed, retry" in busy.json()["detail"]
    assert busy.headers["Retry-After"] == "1"
    assert client.get(f"/batches/{batch_id}").json()["status"] == "running"
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'queued'") == 3

    assert client.post(f"/batches/{batch_id}/cancel").json()["status"] == "cancelled"


def test_a_batch_budget_stops_the_batch_when_reached(
    make_api_client: Callable[..., TestClient],
    db: Database,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    batch_stack: Callable[..., None],
) -> None:
    client = make_api_client()
    batch_id = submit(client, batch_body(20, budget_usd="0.004"))["batch_id"]
    batch_stack(window=2, concurrency=1)
    wait_until(lambda: client.get(f"/batches/{batch_id}").json()["status"] != "running")
    status = client.get(f"/batches/{batch_id}").json()
    assert status["status"] == "budget_exceeded"
    assert status["runs_by_status"].get("budget_exceeded", 0) > 0
    # Spending stops at the budget plus at most the calls already in flight.
    biggest_call = scalar(db, "SELECT max(cost_usd) FROM llm_call_log")
    assert status["cost_so_far_usd"] <= 0.004 + 2 * float(biggest_call)


def test_a_finished_run_and_batch_call_their_webhooks_signed_with_retries(
    make_api_client: Callable[..., TestClient],
    db: Database,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    batch_stack: Callable[..., None],
) -> None:
    webhooks = {
        "webhooks_enabled": "true",
        "secrets_key": SECRETS_KEY,
        "webhook_allowed_destinations": "127.0.0.1/32",
    }
    client = make_api_client(**webhooks)
    secret = client.post("/webhook-secret").json()["secret"]
    with recording_receiver(500) as (url, handler):
        batch_id = submit(client, batch_body(2, callback_url=url))["batch_id"]
        batch_stack(
            DOCPIPE_WEBHOOK_RETRY_BASE_S="0.2",
            **{f"DOCPIPE_{k.upper()}": v for k, v in webhooks.items()},
        )
        wait_until(
            lambda: (
                (client.get(f"/batches/{batch_id}").json()["webhook"] or {}).get("status")
                == "delivered"
            ),
            timeout_s=60,
        )
    webhook = client.get(f"/batches/{batch_id}").json()["webhook"]
    assert (webhook["attempts"], webhook["last_status"]) == (2, 200), "the 500 was retried"
    failed, delivered = handler.received
    assert failed.headers["webhook-id"] == delivered.headers["webhook-id"], "one message id"
    event = Webhook(secret).verify(delivered.body, delivered.headers)
    assert (event["event"], event["batch_id"], event["status"]) == (
        "batch.ended",
        batch_id,
        "done",
    )
    assert event["runs_by_status"] == {"done": 2}


def test_steps_are_the_pipelines_steps() -> None:
    assert DOCUMENT_EXTRACT.step_names == [
        "extract_text",
        "extract_sections",
        "extract_fields",
        "summarize",
    ]


def test_stopping_a_batch_ends_its_runs_and_steps_once_and_only_for_its_tenant(
    db: Database,
) -> None:
    create(db, "a", 2, "x")
    batch_id = str(scalar(db, "SELECT id FROM batch"))
    assert stop_batch(db, "b", batch_id, status="cancelled", reason="test") == []
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'queued'") == 2

    stopped = stop_batch(db, "a", batch_id, status="cancelled", reason="test")
    assert sorted(stopped) == sorted(run_ids_of(db, batch_id))
    assert scalar(db, "SELECT count(*) FROM pipeline_step_result WHERE status = 'pending'") == 0
    # Ended already: the second stop is rolled back whole and says so.
    assert stop_batch(db, "a", batch_id, status="budget_exceeded", reason="again") == []
    assert scalar(db, "SELECT status FROM batch") == "cancelled"
    assert scalar(db, "SELECT array_agg(DISTINCT error) FROM pipeline_run") == ["test"]


def test_a_run_of_a_cancelled_batch_cannot_be_retried_but_one_of_a_done_batch_reopens_it(
    db: Database, settings: Settings
) -> None:
    from docpipe.errors import ConflictError
    from docpipe.state import runs

    create(db, "a", 2, "x")
    batch_id = str(scalar(db, "SELECT id FROM batch"))
    run_ids = sorted(run_ids_of(db, batch_id))
    with db.session() as s:  # one run finished, then the batch was cancelled
        s.conn.execute(
            b"UPDATE pipeline_step_result SET status = 'done' WHERE run_id = %s", (run_ids[0],)
        )
        s.conn.execute(
            b"UPDATE pipeline_run SET status = 'done', steps_done = 3 WHERE id = %s", (run_ids[0],)
        )
    stop_batch(db, "a", batch_id, status="cancelled", reason="test")
    with pytest.raises(ConflictError, match="cancelled; its runs stay stopped"):
        runs.restart_run(db, "a", run_ids[1], None, pipelines=catalog())

    with db.session() as s:  # the same with a batch that simply finished
        s.conn.execute(b"UPDATE batch SET status = 'done'")
    runs.restart_run(db, "a", run_ids[0], "summarize", pipelines=catalog())
    assert scalar(db, "SELECT status FROM batch") == "running"
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_ids[0]) == "queued"
