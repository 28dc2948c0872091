"""The HTTP API against real PostgreSQL and Redis, in-process (TestClient) and as a real
uvicorn process killed between commit and publish. No workers: the assertions are on the
rows in PostgreSQL and on the messages waiting in Redis."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

import docpipe
from docpipe.broker.transport import CeleryPublisher
from docpipe.broker.transport import app as celery_app
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.review import Reason
from docpipe.settings import get_settings
from docpipe.state import admission, runs
from docpipe.state.db import Database
from docpipe_api.main import create_app
from docpipe_dev.localstack import LocalRedis, free_port
from tests.factories import extract_text, scalar
from tests.processes import use_celery_broker

EXTRACT, STEP1, STEP2, STEP3 = DOCUMENT_EXTRACT.step_names
TENANT = "default"
TEXT = "SUPPLY AGREEMENT\nPreamble.\n1. PRICE\nThe price is 100 EUR.\n"
MAX_DOCUMENT_BYTES = 2000
INTERACTIVE = "llm_interactive"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[LocalRedis]:
    parent = Path(tempfile.mkdtemp(prefix="docpipe-api-redis-"))
    try:
        with LocalRedis(parent / "data", persist=False) as server:
            yield server
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def broker_redis(redis_server: LocalRedis) -> Iterator[redis.Redis]:
    redis_server.start()  # in case a test stopped it
    redis_server.flushall()
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def client(
    db: Database,
    database_url: str,
    redis_server: LocalRedis,
    broker_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[TestClient]:
    monkeypatch.setenv("DOCPIPE_DATABASE_URL", database_url)
    monkeypatch.setenv("DOCPIPE_REDIS_URL", redis_server.url)
    monkeypatch.setenv("DOCPIPE_MAX_DOCUMENT_BYTES", str(MAX_DOCUMENT_BYTES))
    monkeypatch.setenv("DOCPIPE_AUTH", "none")  # tenant "default"; keys: test_tenants.py
    monkeypatch.setenv("DOCPIPE_METRICS_PORT", "0")
    monkeypatch.setenv("DOCPIPE_WEBHOOKS_ENABLED", "true")
    monkeypatch.setenv("DOCPIPE_SECRETS_KEY", Fernet.generate_key().decode())
    get_settings.cache_clear()
    previous_broker = celery_app.conf.broker_url
    use_celery_broker(redis_server.url)
    try:
        with TestClient(create_app()) as test_client:
            yield test_client
    finally:
        use_celery_broker(previous_broker)
        get_settings.cache_clear()


def put_text(client: TestClient, document_id: str = "doc-1", text: str = TEXT) -> httpx.Response:
    return client.put(
        f"/documents/{document_id}",
        content=text.encode(),
        headers={"Content-Type": "text/plain; charset=utf-8"},
    )


def extract(
    client: TestClient,
    document_id: str = "doc-1",
    key: str | bytes | None = None,
    **options: Any,
) -> httpx.Response:
    headers: dict[str, str | bytes] = {} if key is None else {"Idempotency-Key": key}
    return client.post(f"/documents/{document_id}/extract", json=options or None, headers=headers)


def started_run(client: TestClient, **options: Any) -> str:
    assert put_text(client).status_code in (200, 201)
    response = extract(client, **options)
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


def count(db: Database, table: str) -> int:
    return int(scalar(db, f"SELECT count(*) FROM {table}"))


# --- documents ----------------------------------------------------------------------------


def test_a_document_is_stored_once_and_never_changed(client: TestClient) -> None:
    first = put_text(client)
    assert first.status_code == 201, first.text
    assert first.headers["location"] == "/documents/doc-1"
    body = first.json()
    assert set(body) == {"id", "sha256", "size_bytes", "created_at", "format", "extracted",
                         "pages", "ocr_pages", "ocr", "warnings"}  # fmt: skip
    assert (body["id"], body["size_bytes"]) == ("doc-1", len(TEXT.encode()))
    # A text is its own text: one page, no OCR, nothing to extract.
    assert (body["format"], body["extracted"], body["pages"], body["ocr"]) == (
        "text",
        True,
        1,
        False,
    )

    again = put_text(client)
    assert again.status_code == 200
    assert again.json() == body

    other = put_text(client, text="another contract")
    assert other.status_code == 409
    assert "immutable" in other.json()["detail"]

    read = client.get("/documents/doc-1")
    assert (read.status_code, read.json()) == (200, body)


def test_a_document_may_be_sent_as_json_or_under_a_new_id(client: TestClient) -> None:
    stored = client.put("/documents/doc-json", json={"text": "Привет, договор"})
    assert stored.status_code == 201
    assert stored.json()["size_bytes"] == len("Привет, договор".encode())

    created = client.post("/documents", json={"text": TEXT})
    assert created.status_code == 201
    new_id = created.json()["id"]
    assert len(new_id) == 32 and created.headers["location"] == f"/documents/{new_id}"
    assert client.get(f"/documents/{new_id}").json() == created.json()

    plain = client.post("/documents", content=b"plain", headers={"Content-Type": "text/plain"})
    assert plain.status_code == 201 and plain.json()["id"] != new_id


def test_unknown_documents_are_not_found(client: TestClient) -> None:
    response = client.get("/documents/nope")
    assert response.status_code == 404
    assert response.json() == {"detail": "document 'nope' does not exist"}
    assert client.get("/documents/nul%00byte").status_code == 404
    assert extract(client, document_id="nul%00byte").status_code == 404


def test_documents_over_the_size_limit_are_refused_with_413(
    client: TestClient, db: Database
) -> None:
    big = "x" * (MAX_DOCUMENT_BYTES + 1)
    declared = put_text(client, text=big)
    assert declared.status_code == 413
    assert str(MAX_DOCUMENT_BYTES) in declared.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies while reading
        for _ in range(10):
            yield b"y" * 500

    streamed = client.put(
        "/documents/doc-big", content=chunks(), headers={"Content-Type": "text/plain"}
    )
    assert streamed.status_code == 413
    assert client.post("/documents", json={"text": big}).status_code == 413
    assert count(db, "document") == 0


@pytest.mark.parametrize(
    "content_type",
    [None, "application/octet-stream", "text/html", "text/plain; charset=latin-1"],
)
def test_other_content_types_are_refused_with_415(
    client: TestClient, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = client.put("/documents/doc-1", content=b"text", headers=headers)
    assert response.status_code == 415
    assert "text/plain" in response.json()["detail"] or "UTF-8" in response.json()["detail"]


@pytest.mark.parametrize(
    ("content_type", "body", "message"),
    [
        ("text/plain", b"caf\xe9", "not valid UTF-8"),
        ("text/plain", b"nul\x00byte", "NUL"),
        ("application/json", b'{"txt": "a"}', "body.text: Field required"),
        ("application/json", b'{"text": "a", "x": 1}', "body.x: Extra inputs"),
        ("application/json", b'{"text": 5}', "body.text: Input should be a valid string"),
        ("application/json", b"not json", "Invalid JSON"),
        ("application/json", b'"just a string"', "body"),
    ],
)
def test_malformed_documents_are_refused_with_422(
    client: TestClient, content_type: str, body: bytes, message: str
) -> None:
    response = client.put("/documents/doc-1", content=body, headers={"Content-Type": content_type})
    assert response.status_code == 422
    assert message in response.json()["detail"]


@pytest.mark.parametrize("document_id", ["-leading-dash", "has space", "x" * 129, "semi;colon"])
def test_invalid_document_ids_are_refused_with_422(client: TestClient, document_id: str) -> None:
    response = put_text(client, document_id=document_id)
    assert response.status_code == 422
    assert "document id" in response.json()["detail"]


# --- extraction runs ----------------------------------------------------------------------


def test_extract_creates_a_run_and_publishes_its_first_step(
    client: TestClient, db: Database, broker_redis: redis.Redis
) -> None:
    put_text(client)
    response = extract(client, key="order-42")
    assert response.status_code == 202, response.text
    body = response.json()
    assert body == {"run_id": body["run_id"], "status": "queued", "created": True}
    assert response.headers["location"] == f"/runs/{body['run_id']}"
    assert count(db, "pipeline_run") == 1
    assert scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL") == 1
    assert broker_redis.llen(INTERACTIVE) == 1
    message = json.loads(broker_redis.lindex(INTERACTIVE, 0))  # type: ignore[arg-type]
    assert message["headers"]["task"] == "docpipe.run_step"
    assert message["headers"]["argsrepr"] == repr((body["run_id"], EXTRACT))


def test_the_same_idempotency_key_returns_the_same_run_and_sends_nothing_more(
    client: TestClient, db: Database, broker_redis: redis.Redis
) -> None:
    put_text(client)
    first = extract(client, key="k-1", deadline_s=600)
    again = extract(client, key="k-1", deadline_s=600)
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["run_id"] == first.json()["run_id"]
    assert (first.json()["created"], again.json()["created"]) == (True, False)
    assert count(db, "pipeline_run") == 1
    assert broker_redis.llen(INTERACTIVE) == 1

    # The pipeline's default and the explicit default are the same request.
    put_text(client, document_id="doc-2")
    implicit = extract(client, document_id="doc-2", key="k-2")
    explicit = extract(client, document_id="doc-2", key="k-2", pipeline="document_extract:v1")
    assert explicit.json()["run_id"] == implicit.json()["run_id"]


def test_the_same_key_with_another_request_is_a_conflict(client: TestClient, db: Database) -> None:
    put_text(client)
    put_text(client, document_id="doc-2")
    assert extract(client, key="k").status_code == 202
    for response in (
        extract(client, key="k", lane="batch"),
        extract(client, document_id="doc-2", key="k"),
    ):
        assert response.status_code == 409
        assert "already used for a different request" in response.json()["detail"]
    assert count(db, "pipeline_run") == 1


def test_without_a_key_every_post_starts_a_new_run(
    client: TestClient, db: Database, broker_redis: redis.Redis
) -> None:
    put_text(client)
    ids = {extract(client).json()["run_id"] for _ in range(3)}
    assert len(ids) == 3
    assert count(db, "pipeline_run") == 3
    assert broker_redis.llen(INTERACTIVE) == 3


@pytest.mark.parametrize("key", ["", "k" * 201, "ключ".encode(), b"tab\there"])
def test_malformed_idempotency_keys_are_refused_with_422(
    client: TestClient, db: Database, key: str | bytes
) -> None:
    put_text(client)
    response = extract(client, key=key)
    assert response.status_code == 422
    assert "Idempotency-Key" in response.json()["detail"]
    assert count(db, "pipeline_run") == 0


def test_extracting_an_unknown_document_is_not_found(client: TestClient, db: Database) -> None:
    response = extract(client, document_id="missing", key="k")
    assert response.status_code == 404
    assert "missing" in response.json()["detail"]
    assert count(db, "pipeline_run") == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"colour": "red"}, "body.colour: Extra inputs are not permitted"),
        ({"lane": "express"}, "body.lane"),
        ({"deadline_s": 0}, "body.deadline_s"),
        ({"budget_usd": -1}, "body.budget_usd"),
        ({"budget_usd": "0.1234567"}, "at most 6 places"),
        ({"budget_usd": ""}, "body.budget_usd"),
        ({"budget_usd": 0.0000004}, "from 0.000001"),
        ({"callback_url": "ftp://example.org/x"}, "body.callback_url"),
        ({"start_at": "2030-01-01T00:00:00"}, "timezone"),
        ({"pipeline": "nope:v9"}, "unknown pipeline"),
        ({"lane": "batch", "start_at": "2030-01-01T00:00:00Z"}, "interactive lane only"),
    ],
)
def test_malformed_options_are_refused_with_422(
    client: TestClient, db: Database, options: dict[str, Any], message: str
) -> None:
    put_text(client)
    response = extract(client, **options)
    assert response.status_code == 422
    assert message in response.json()["detail"]
    assert count(db, "pipeline_run") == 0


def test_options_must_be_json(client: TestClient) -> None:
    put_text(client)
    response = client.post(
        "/documents/doc-1/extract", content=b"lane=batch", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 415


def test_options_are_stored_with_the_run(client: TestClient, db: Database) -> None:
    assert client.post("/webhook-secret").status_code == 201  # callback_url wants one
    run_id = started_run(
        client, deadline_s=3600, budget_usd=0.25, callback_url="https://example.org/hook"
    )
    with db.session() as s:
        row = s.conn.execute(
            b"SELECT deadline_at, budget_usd, callback_url FROM pipeline_run WHERE id = %s",
            (run_id,),
        ).fetchone()
    assert row is not None
    remaining = row["deadline_at"] - datetime.now(UTC)
    assert timedelta(minutes=59) < remaining <= timedelta(hours=1)
    assert (str(row["budget_usd"]), row["callback_url"]) == ("0.250000", "https://example.org/hook")


def test_a_later_start_counts_the_deadline_from_then(client: TestClient, db: Database) -> None:
    start_at = datetime.now(UTC) + timedelta(days=2)
    run_id = started_run(client, start_at=start_at.isoformat(), deadline_s=60)
    deadline = scalar(db, "SELECT deadline_at FROM pipeline_run WHERE id = %s", run_id)
    assert abs(deadline - (start_at + timedelta(seconds=60))) < timedelta(seconds=1)


def test_a_json_number_budget_is_kept_in_micro_dollars(client: TestClient, db: Database) -> None:
    run_id = started_run(client, budget_usd=0.1234567)
    assert str(scalar(db, "SELECT budget_usd FROM pipeline_run WHERE id = %s", run_id)) == (
        "0.123457"
    )


def test_a_future_start_is_parked_in_postgres_not_in_redis(
    client: TestClient, db: Database, broker_redis: redis.Redis
) -> None:
    start_at = datetime.now(UTC) + timedelta(hours=1)
    started_run(client, start_at=start_at.isoformat())
    assert broker_redis.llen(INTERACTIVE) == 0
    with db.session() as s:
        row = s.conn.execute(b"SELECT available_at, published_at FROM outbox").fetchone()
    assert row is not None and row["published_at"] is None
    assert abs(row["available_at"] - start_at) < timedelta(seconds=1)


def test_batch_lane_runs_start_while_the_window_has_room_and_then_wait(
    client: TestClient, db: Database, broker_redis: redis.Redis
) -> None:
    window = get_settings().batch_admission_window
    assert put_text(client).status_code in (200, 201)
    run_ids = [extract(client, key=f"b-{i}", lane="batch").json()["run_id"]
               for i in range(window + 1)]  # fmt: skip
    assert client.get(f"/runs/{run_ids[0]}").json()["lane"] == "batch"
    assert broker_redis.llen("llm_batch") == window, "the window's runs start at once"
    waiting = scalar(db, "SELECT admitted_at IS NULL FROM pipeline_run WHERE id = %s",
                     run_ids[-1])  # fmt: skip
    assert waiting is True, "the run beyond the window waits in PostgreSQL"


def test_a_batch_lane_run_whose_admission_fails_is_stored_and_left_to_beat(
    client: TestClient, db: Database, broker_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def database_gone(*_: object) -> None:
        raise psycopg.OperationalError("connection lost after the commit")

    monkeypatch.setattr(admission, "admit_and_publish", database_gone)
    run_id = started_run(client, lane="batch")
    assert scalar(db, "SELECT admitted_at IS NULL FROM pipeline_run WHERE id = %s", run_id)
    assert broker_redis.llen("llm_batch") == 0
    admission.admit_batch_runs(db, get_settings())  # what beat's next tick does
    assert scalar(db, "SELECT admitted_at IS NOT NULL FROM pipeline_run WHERE id = %s", run_id)


# --- runs ---------------------------------------------------------------------------------

RUN_FIELDS = {
    "run_id", "pipeline", "document_id", "lane", "priority", "batch_id", "status", "current_step",
    "steps_done", "steps_total", "cost_so_far_usd", "error", "created_at", "finished_at",
    "steps", "webhook", "result", "values", "review", "decisions",
}  # fmt: skip
STEP_FIELDS = {
    "step", "status", "attempt", "model", "model_choices", "prompt_version", "input_tokens",
    "output_tokens",
    "cost_usd", "error", "started_at", "finished_at", "reviewed",
}  # fmt: skip


def test_a_new_run_reports_its_status_and_steps(client: TestClient) -> None:
    run_id = started_run(client)
    response = client.get(f"/runs/{run_id}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == RUN_FIELDS
    assert {
        k: body[k]
        for k in ("run_id", "pipeline", "document_id", "lane", "priority", "status", "current_step")
    } == {
        "run_id": run_id,
        "pipeline": "document_extract:v1",
        "document_id": "doc-1",
        "lane": "interactive",
        "priority": "normal",
        "status": "queued",
        "current_step": EXTRACT,
    }
    assert (body["steps_done"], body["steps_total"], body["cost_so_far_usd"]) == (0, 4, 0)
    assert body["result"] is None
    assert [s["step"] for s in body["steps"]] == [EXTRACT, STEP1, STEP2, STEP3]
    assert all(set(s) == STEP_FIELDS and s["status"] == "pending" for s in body["steps"])


def record_steps(
    db: Database,
    run_id: str,
    outputs: dict[str, Any],
    steps: tuple[str, ...],
    *,
    review: Sequence[Reason] = (),
) -> None:
    """Claim and record ``steps`` in order with their ``outputs``, as a worker would; the
    last one ends the run (or pauses it for review, for ``review``'s reasons)."""
    for step, nxt in zip(steps, (*steps[1:], None), strict=True):
        claim = runs.claim_step(db, run_id, step, owner="w", lease_s=30)
        assert claim is not None
        runs.record_step_result(
            db, claim, owner="w", output=outputs[step], model="gpt-4o-mini",
            prompt_version=f"{step}@v1", next_step=nxt,
            review=() if nxt else review,
        )  # fmt: skip


def test_a_finished_run_includes_every_steps_output(client: TestClient, db: Database) -> None:
    run_id = started_run(client)
    outputs = {EXTRACT: {"format": "text"}, STEP1: {"sections": []},
               STEP2: {"fields": {}, "found_in": {}}, STEP3: {"s": 1}}  # fmt: skip
    record_steps(db, run_id, outputs, (EXTRACT, STEP1, STEP2, STEP3))
    body = client.get(f"/runs/{run_id}").json()
    assert (body["status"], body["current_step"], body["steps_done"]) == ("done", None, 4)
    assert body["result"] == outputs
    assert body["values"] is None  # no step recorded evidence
    assert body["steps"][1]["prompt_version"] == f"{STEP1}@v1"
    assert body["finished_at"] is not None


def test_a_run_in_review_shows_its_values_with_their_evidence(
    client: TestClient, db: Database
) -> None:
    run_id = started_run(client)
    found = {"field": "term_months", "value": 24, "quote": "twenty-four (24) months",
             "start": 10, "end": 33, "page": 1, "section": "4", "section_title": "Term",
             "supported": True}  # fmt: skip
    invented = {**found, "field": "liability_cap", "value": {"amount": 1, "currency": "USD"},
                "quote": "made up", "start": None, "end": None, "page": None, "section": None,
                "section_title": None, "supported": False}  # fmt: skip
    outputs = {
        STEP1: {"sections": [], "evidence": [{"field": "not a record"}, "nor this"]},
        STEP2: {"fields": {}, "found_in": {}, "evidence": [found, invented]},
        STEP3: {"s": 1},
    }
    extract_text(db, run_id)
    record_steps(
        db, run_id, outputs, (STEP1, STEP2, STEP3), review=[Reason("unsupported_evidence", "1")]
    )
    body = client.get(f"/runs/{run_id}").json()
    assert (body["status"], body["error"]) == ("needs_review", "unsupported_evidence: 1")
    assert body["result"] is None
    assert body["values"] == [{**v, "path": None, "corrected": False} for v in (found, invented)]
    assert body["review"]["step"] == STEP3
    schema = client.get("/openapi.json").json()["components"]["schemas"]["EvidencedValue"]
    assert set(schema["properties"]) == {*found, "path", "corrected"}
    assert "not found in the document" in schema["properties"]["supported"]["description"]


@pytest.mark.parametrize("run_id", [str(uuid.uuid4()), "not-a-uuid"])
@pytest.mark.parametrize(
    ("method", "suffix"), [("GET", ""), ("POST", "/cancel"), ("POST", "/retry"), ("GET", "/events")]
)
def test_unknown_runs_are_not_found(
    client: TestClient, run_id: str, method: str, suffix: str
) -> None:
    response = client.request(method, f"/runs/{run_id}{suffix}")
    assert response.status_code == 404
    assert "does not exist" in response.json()["detail"]


def test_cancel_ends_the_run_once(client: TestClient) -> None:
    run_id = started_run(client)
    cancelled = client.post(f"/runs/{run_id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert {s["status"] for s in cancelled.json()["steps"]} == {"cancelled"}
    again = client.post(f"/runs/{run_id}/cancel")
    assert again.status_code == 409
    assert "already ended (cancelled)" in again.json()["detail"]


def test_retry_refuses_active_runs_and_unknown_steps(client: TestClient) -> None:
    run_id = started_run(client)
    active = client.post(f"/runs/{run_id}/retry")
    assert active.status_code == 409
    assert "only ended runs restart" in active.json()["detail"]
    client.post(f"/runs/{run_id}/cancel")
    unknown = client.post(f"/runs/{run_id}/retry", params={"from_step": "nope"})
    assert unknown.status_code == 409
    assert "has no step 'nope'" in unknown.json()["detail"]
    later = client.post(f"/runs/{run_id}/retry", params={"from_step": STEP2})
    assert later.status_code == 409
    assert "an earlier step is not done" in later.json()["detail"]


def test_retry_reopens_an_ended_run_and_publishes_its_step(
    client: TestClient, broker_redis: redis.Redis
) -> None:
    run_id = started_run(client)
    client.post(f"/runs/{run_id}/cancel")
    broker_redis.delete(INTERACTIVE)
    response = client.post(f"/runs/{run_id}/retry")
    assert response.status_code == 202, response.text
    assert (response.json()["status"], response.json()["current_step"]) == ("queued", EXTRACT)
    assert broker_redis.llen(INTERACTIVE) == 1


def test_many_runs_are_read_in_one_request_in_the_order_asked(
    client: TestClient, db: Database
) -> None:
    first = started_run(client)
    second = extract(client, key="second").json()["run_id"]
    unknown = str(uuid.uuid4())
    finish = f"{second},{unknown},{first},{second}"
    read = client.get("/runs", params={"ids": finish})
    assert read.status_code == 200
    assert [r["run_id"] for r in read.json()["runs"]] == [second, first]
    assert read.json()["runs"][1] == client.get(f"/runs/{first}").json()

    too_many = ",".join(str(uuid.uuid4()) for _ in range(101))
    refused = client.get("/runs", params={"ids": too_many})
    assert refused.status_code == 422
    assert "101 ids, at most 100" in refused.json()["detail"]
    for malformed in ("", "x", f"{first}, {second}", f"{first},", f"{first}\n"):
        assert client.get("/runs", params={"ids": malformed}).status_code == 422, malformed
    assert client.get("/runs").status_code == 422


def test_retry_keeps_the_runs_deadline_and_refuses_once_it_has_passed(
    client: TestClient, db: Database
) -> None:
    run_id = started_run(client, deadline_s=3600)
    deadline = scalar(db, "SELECT deadline_at FROM pipeline_run WHERE id = %s", run_id)
    client.post(f"/runs/{run_id}/cancel")
    assert client.post(f"/runs/{run_id}/retry").status_code == 202
    assert scalar(db, "SELECT deadline_at FROM pipeline_run WHERE id = %s", run_id) == deadline

    client.post(f"/runs/{run_id}/cancel")
    with db.session() as s:
        s.conn.execute(b"UPDATE pipeline_run SET deadline_at = now() - interval '1 s'")
    late = client.post(f"/runs/{run_id}/retry")
    assert late.status_code == 409
    assert "deadline passed" in late.json()["detail"]
    assert client.get(f"/runs/{run_id}").json()["status"] == "cancelled"


def test_a_retried_batch_lane_run_waits_for_admission_like_a_new_one(
    client: TestClient, db: Database, broker_redis: redis.Redis
) -> None:
    window = get_settings().batch_admission_window
    assert put_text(client).status_code in (200, 201)
    retried = extract(client, key="retried", lane="batch").json()["run_id"]
    client.post(f"/runs/{retried}/cancel")
    in_flight = [extract(client, key=f"b-{i}", lane="batch").json()["run_id"]
                 for i in range(window)]  # fmt: skip
    broker_redis.delete("llm_batch")

    response = client.post(f"/runs/{retried}/retry")

    assert response.status_code == 202
    assert response.json()["status"] == "queued"
    assert broker_redis.llen("llm_batch") == 0, "the window is full: no message beyond it"
    assert scalar(db, "SELECT admitted_at FROM pipeline_run WHERE id = %s", retried) is None
    # A slot frees up: admission lets the retried run in, as it would a new one.
    client.post(f"/runs/{in_flight[0]}/cancel")
    assert admission.admit_and_publish(db, CeleryPublisher(), get_settings()) == 1
    assert scalar(db, "SELECT admitted_at FROM pipeline_run WHERE id = %s", retried) is not None
    assert broker_redis.llen("llm_batch") == 1


def read_events(client: TestClient, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    with client.stream("GET", f"/runs/{run_id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for block in response.read().decode().split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in lines:
                events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_the_event_stream_of_an_ended_run_is_its_final_status(client: TestClient) -> None:
    run_id = started_run(client)
    client.post(f"/runs/{run_id}/cancel")
    events = read_events(client, run_id)
    assert [name for name, _ in events] == ["end"]
    assert events[0][1]["status"] == "cancelled"


def test_the_event_stream_reports_progress_until_the_run_ends(
    client: TestClient, db: Database
) -> None:
    run_id = started_run(client)
    cancel_later = threading.Timer(1.2, runs.cancel_run, (db, TENANT, run_id))
    cancel_later.start()
    try:
        events = read_events(client, run_id)
    finally:
        cancel_later.join()
    assert [name for name, _ in events] == ["progress", "end"]
    progress, end = events[0][1], events[1][1]
    assert (progress["status"], progress["current_step"]) == ("queued", EXTRACT)
    assert "result" not in progress
    assert end["status"] == "cancelled"


# --- probes and the OpenAPI document ------------------------------------------------------


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "version": docpipe.__version__}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    # Redis is not asked: see test_outages.py for readiness while it is down.
    assert ready.json() == {"status": "ready", "checks": {"postgres": "ok"}}


def test_the_openapi_document_lists_every_route_and_its_errors(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    paths = document["paths"]
    expected = {
        ("put", "/documents/{document_id}"): {"201", "200", "409", "413", "415", "422"},
        ("post", "/documents"): {"201", "413", "415", "422"},
        ("get", "/documents/{document_id}"): {"200", "404"},
        ("delete", "/documents/{document_id}"): {"204", "404", "409"},
        ("post", "/documents/{document_id}/extract"): {
            "202",
            "403",
            "404",
            "409",
            "413",
            "415",
            "422",
        },
        ("get", "/runs"): {"200", "422"},
        ("get", "/runs/{run_id}"): {"200", "404"},
        ("post", "/runs/{run_id}/cancel"): {"200", "404", "409"},
        ("post", "/runs/{run_id}/retry"): {"202", "404", "409", "422"},
        ("get", "/runs/{run_id}/events"): {"200", "404"},
        ("post", "/runs/{run_id}/review"): {"200", "404", "409", "413", "415", "422"},
        ("get", "/reviews"): {"200", "422"},
        ("get", "/reviews/{run_id}"): {"200", "404", "409", "422"},
        ("get", "/documents/{document_id}/text"): {"200", "404", "409", "422"},
        ("post", "/batches"): {"202", "403", "404", "409", "413", "415", "422"},
        ("get", "/batches/{batch_id}"): {"200", "404"},
        ("get", "/batches/{batch_id}/runs"): {"200", "404", "422"},
        ("get", "/batches/{batch_id}/results"): {"200", "404", "409", "422", "503"},
        ("post", "/batches/{batch_id}/cancel"): {"200", "404", "409"},
        ("get", "/pipelines"): {"200"},
        ("get", "/pipelines/{key}"): {"200", "404"},
        ("post", "/webhook-secret"): {"201", "409", "422"},
        ("get", "/webhook-secret"): {"200", "404"},
        ("get", "/healthz"): {"200"},
        ("get", "/readyz"): {"200", "503"},
    }
    listed = {(method, path) for path, ops in paths.items() for method in ops}
    assert listed == set(expected)
    for (method, path), codes in expected.items():
        responses = paths[path][method]["responses"]
        assert codes <= set(responses), (method, path, set(responses))
        for code in codes - {"200", "201", "202", "204"}:
            if path != "/readyz":
                schema = responses[code]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (path, code)
    # Every error, validation included, has the one ErrorBody shape.
    assert "HTTPValidationError" not in document["components"]["schemas"]
    assert "requestBody" in paths["/documents/{document_id}"]["put"]
    extract_body = paths["/documents/{document_id}/extract"]["post"]["requestBody"]
    assert extract_body["content"]["application/json"]["schema"]["additionalProperties"] is False


# --- a real server killed between commit and publish --------------------------------------


def test_a_crash_between_commit_and_publish_leaves_the_message_in_the_outbox(
    db: Database,
    database_url: str,
    redis_server: LocalRedis,
    broker_redis: redis.Redis,
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DOCPIPE_DATABASE_URL": database_url,
        "DOCPIPE_REDIS_URL": redis_server.url,
        "DOCPIPE_CRASH_AT": "api.after_commit",
        "DOCPIPE_AUTH": "none",
    }
    log_path = tmp_path / "uvicorn.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "docpipe_api.main:app", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)
            stored = http.put(
                "/documents/doc-1", content=TEXT, headers={"Content-Type": "text/plain"}
            )
            assert stored.status_code == 201
            with pytest.raises(httpx.TransportError):
                http.post("/documents/doc-1/extract", headers={"Idempotency-Key": "k"})
        assert server.wait(timeout=10) == 137
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert "crash point 'api.after_commit' reached" in log_path.read_text()
    assert count(db, "pipeline_run") == 1
    assert scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 1
    assert broker_redis.llen(INTERACTIVE) == 0


def test_a_run_and_a_batch_carry_the_priority_asked_for_or_their_lanes(
    client: TestClient, db: Database
) -> None:
    client.put("/documents/doc-p", content=b"TITLE\n1. ONE\nText.\n",
               headers={"Content-Type": "text/plain"})  # fmt: skip
    urgent = client.post("/documents/doc-p/extract", json={"priority": "urgent"},
                         headers={"Idempotency-Key": "p1"}).json()["run_id"]  # fmt: skip
    assert client.get(f"/runs/{urgent}").json()["priority"] == "urgent"
    refused = client.post("/documents/doc-p/extract", json={"priority": "asap"},
                          headers={"Idempotency-Key": "p2"})  # fmt: skip
    assert refused.status_code == 422 and "priority" in refused.text
    batch = client.post("/batches", json={"documents": [{"id": "doc-p"}]},
                        headers={"Idempotency-Key": "p3"}).json()["batch_id"]  # fmt: skip
    assert scalar(db, "SELECT priority FROM pipeline_run WHERE batch_id = %s", batch) == "low"
