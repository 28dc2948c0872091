"""Runs (GET /runs, GET /runs/{id}, cancel, retry, the event stream): what a run reports,
and what ending or reopening it changes."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from docpipe.broker.transport import CeleryPublisher
from docpipe.pipelines.review import Reason
from docpipe.settings import get_settings
from docpipe.state import admission, runs
from docpipe.state.db import Database
from tests.support.api import (
    EXTRACT,
    INTERACTIVE,
    STEP1,
    STEP2,
    STEP3,
    TENANT,
    extract,
    put_text,
    started_run,
)
from tests.support.factories import scalar

RUN_FIELDS = {
    "run_id",
    "pipeline",
    "document_id",
    "lane",
    "priority",
    "batch_id",
    "status",
    "current_step",
    "steps_done",
    "steps_total",
    "cost_so_far_usd",
    "error",
    "created_at",
    "finished_at",
    "steps",
    "webhook",
    "result",
    "values",
    "review",
    "decisions",
}
STEP_FIELDS = {
    "step",
    "status",
    "attempt",
    "model",
    "model_choices",
    "reused_calls",
    "prompt_version",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "error",
    "started_at",
    "finished_at",
    "reviewed",
}


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
        "current_step": STEP1,
    }
    # A text document's extract_text is done as the run is created.
    assert (body["steps_done"], body["steps_total"], body["cost_so_far_usd"]) == (1, 4, 0)
    assert body["result"] is None
    assert [s["step"] for s in body["steps"]] == [EXTRACT, STEP1, STEP2, STEP3]
    assert all(set(s) == STEP_FIELDS for s in body["steps"])
    assert [s["status"] for s in body["steps"]] == ["done", "pending", "pending", "pending"]


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
            db,
            claim,
            owner="w",
            output=outputs[step],
            model="gpt-4o-mini",
            prompt_version=f"{step}@v1",
            next_step=nxt,
            review=() if nxt else review,
        )


def test_a_finished_run_includes_every_steps_output(client: TestClient, db: Database) -> None:
    run_id = started_run(client)
    outputs = {STEP1: {"sections": []}, STEP2: {"fields": {}, "found_in": {}}, STEP3: {"s": 1}}
    record_steps(db, run_id, outputs, (STEP1, STEP2, STEP3))
    body = client.get(f"/runs/{run_id}").json()
    assert (body["status"], body["current_step"], body["steps_done"]) == ("done", None, 4)
    assert body["result"] == {EXTRACT: body["result"][EXTRACT], **outputs}
    assert body["result"][EXTRACT]["format"] == "text"
    assert body["values"] is None  # no step recorded evidence
    assert body["steps"][1]["prompt_version"] == f"{STEP1}@v1"
    assert body["finished_at"] is not None


def test_a_run_in_review_shows_its_values_with_their_evidence(
    client: TestClient, db: Database
) -> None:
    run_id = started_run(client)
    found = {
        "field": "term_months",
        "value": 24,
        "quote": "twenty-four (24) months",
        "start": 10,
        "end": 33,
        "page": 1,
        "section": "4",
        "section_title": "Term",
        "supported": True,
    }
    invented = {
        **found,
        "field": "liability_cap",
        "value": {"amount": 1, "currency": "USD"},
        "quote": "made up",
        "start": None,
        "end": None,
        "page": None,
        "section": None,
        "section_title": None,
        "supported": False,
    }
    outputs = {
        STEP1: {"sections": [], "evidence": [{"field": "not a record"}, "nor this"]},
        STEP2: {"fields": {}, "found_in": {}, "evidence": [found, invented]},
        STEP3: {"s": 1},
    }
    record_steps(
        db, run_id, outputs, (STEP1, STEP2, STEP3), review=[Reason("unsupported_evidence", "1")]
    )
    body = client.get(f"/runs/{run_id}").json()
    assert (body["status"], body["error"]) == ("needs_review", "unsupported_evidence: 1")
    assert body["result"] is None
    # A text document has no pages to draw boxes on.
    unset = {
        "path": None,
        "support": None,
        "corrected": False,
        "corrected_by": None,
        "quoted_by": None,
    }
    assert body["values"] == [
        {**v, **unset, "model_quote": None, "boxes": []} for v in (found, invented)
    ]
    assert body["review"]["step"] == STEP3
    schema = client.get("/openapi.json").json()["components"]["schemas"]["EvidencedValueOut"]
    assert set(schema["properties"]) == {*found, *unset, "model_quote", "boxes"}
    assert "the value can be read in it" in schema["properties"]["supported"]["description"]


@pytest.mark.parametrize("run_id", ["0b6f2c1e-5d3a-4f7e-9a21-3c8d4e5f6a7b", "not-a-uuid"])
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
    assert [s["status"] for s in cancelled.json()["steps"]] == ["done"] + ["cancelled"] * 3
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
    assert unknown.status_code == 422, "no pipeline has it: the document's enum says so"
    assert "no pipeline here has a step 'nope'" in unknown.json()["detail"]
    elsewhere = client.post(f"/runs/{run_id}/retry", params={"from_step": "verdict"})
    assert elsewhere.status_code == 409, "a step of another pipeline: the run says no"
    assert "has no step 'verdict'" in elsewhere.json()["detail"]
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
    assert (response.json()["status"], response.json()["current_step"]) == ("queued", STEP1)
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
    listed = client.get("/runs").json()  # without ids: the tenant's runs, newest first
    assert [r["run_id"] for r in listed["runs"]] == [second, first]


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
    in_flight = [
        extract(client, key=f"b-{i}", lane="batch").json()["run_id"] for i in range(window)
    ]
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
    assert (progress["status"], progress["current_step"]) == ("queued", STEP1)
    assert "result" not in progress
    assert end["status"] == "cancelled"
