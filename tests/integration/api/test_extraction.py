"""Starting an extraction (POST /documents/{id}/extract): idempotency, options, lanes and
priorities, and a real uvicorn process killed between commit and publish. The assertions
are on the rows in PostgreSQL and on the messages waiting in Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
from fastapi.testclient import TestClient

from docpipe.settings import get_settings
from docpipe.state import admission, after_commit
from docpipe.state.db import Database
from docpipe_dev.localstack import LocalRedis, free_port
from tests.support.api import (
    INTERACTIVE,
    STEP1,
    TEXT,
    count,
    extract,
    put_text,
    started_run,
)
from tests.support.factories import scalar


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
    # A text document's extract_text was done with the run: its first message is step 2's.
    assert message["headers"]["argsrepr"] == repr((body["run_id"], STEP1))


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
    run_ids = [
        extract(client, key=f"b-{i}", lane="batch").json()["run_id"] for i in range(window + 1)
    ]
    assert client.get(f"/runs/{run_ids[0]}").json()["lane"] == "batch"
    assert broker_redis.llen("llm_batch") == window, "the window's runs start at once"
    waiting = scalar(db, "SELECT admitted_at IS NULL FROM pipeline_run WHERE id = %s", run_ids[-1])
    assert waiting is True, "the run beyond the window waits in PostgreSQL"


def test_a_batch_lane_run_whose_admission_fails_is_stored_and_left_to_beat(
    client: TestClient, db: Database, broker_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def database_gone(*_: object) -> None:
        raise psycopg.OperationalError("connection lost after the commit")

    monkeypatch.setattr(after_commit, "admit_and_publish", database_gone)
    run_id = started_run(client, lane="batch")
    assert scalar(db, "SELECT admitted_at IS NULL FROM pipeline_run WHERE id = %s", run_id)
    assert broker_redis.llen("llm_batch") == 0
    admission.admit_batch_runs(db, get_settings())  # what beat's next tick does
    assert scalar(db, "SELECT admitted_at IS NOT NULL FROM pipeline_run WHERE id = %s", run_id)


def test_a_run_and_a_batch_carry_the_priority_asked_for_or_their_lanes(
    client: TestClient, db: Database
) -> None:
    client.put(
        "/documents/doc-p",
        content=b"TITLE\n1. ONE\nText.\n",
        headers={"Content-Type": "text/plain"},
    )
    urgent = client.post(
        "/documents/doc-p/extract", json={"priority": "urgent"}, headers={"Idempotency-Key": "p1"}
    ).json()["run_id"]
    assert client.get(f"/runs/{urgent}").json()["priority"] == "urgent"
    refused = client.post(
        "/documents/doc-p/extract", json={"priority": "asap"}, headers={"Idempotency-Key": "p2"}
    )
    assert refused.status_code == 422 and "priority" in refused.text
    batch = client.post(
        "/batches", json={"documents": [{"id": "doc-p"}]}, headers={"Idempotency-Key": "p3"}
    ).json()["batch_id"]
    assert scalar(db, "SELECT priority FROM pipeline_run WHERE batch_id = %s", batch) == "low"


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
