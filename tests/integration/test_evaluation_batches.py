"""An evaluation is a batch (issue 34, item 3): its progress in one request while it runs,
and its budget stops it like any batch's. Real PostgreSQL, Redis, a batch worker, beat and
the fake provider."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACTS = sample_contracts(12)


def made_set(client: TestClient) -> None:
    created = client.post(
        "/evaluation-sets",
        json={"name": "contracts", "pipeline": "document_extract", "step": "extract_fields"},
    )
    assert created.status_code == 201, created.text
    lines = b"".join(
        json.dumps(
            {"document": {"id": c.slug, "text": c.text}, "expected": {"fields": c.expected}}
        ).encode()
        + b"\n"
        for c in CONTRACTS
    )
    added = client.post(
        "/evaluation-sets/contracts/items",
        content=lines,
        headers={"Content-Type": "application/jsonl"},
    )
    assert added.status_code == 200, added.text


def test_an_evaluation_shows_its_progress_and_stops_at_its_budget(
    make_api_client: Callable[..., TestClient],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
    fake_llm: FakeLLM,
    db: Database,
) -> None:
    fake_llm.configure(latency_ms=[100, 100])
    client = make_api_client(batch_admission_window=2)
    made_set(client)
    started = client.post(
        "/evaluations",
        json={"set": "contracts", "pipeline": "document_extract:v1", "budget_usd": "0.004"},
    )
    assert started.status_code == 202, started.text
    evaluation_id = started.json()["id"]
    # No worker yet: the evaluation is running, its batch's progress in the same answer.
    running = client.get(f"/evaluations/{evaluation_id}").json()
    assert (running["status"], running["report"]) == ("running", None)
    batch = running["batch"]
    assert (batch["runs_total"], batch["steps_total"]) == (12, 48), "12 runs of 4 steps"
    assert sum(batch["runs_by_status"].values()) == 12
    assert (batch["status"], batch["budget_usd"], batch["cost_so_far_usd"]) == (
        "running",
        0.004,
        0.0,
    )
    start_worker("batch", concurrency=1)
    start_beat()

    reported = wait_until(
        lambda: (r := client.get(f"/evaluations/{evaluation_id}").json())["report"] and r,
        timeout_s=180,
    )
    report = reported["report"]
    assert report["documents"] == 12
    assert report["runs_by_status"].get("budget_exceeded", 0) > 0, report["runs_by_status"]
    # Spending stopped at the budget plus at most the calls already in flight.
    biggest_call = scalar(db, "SELECT max(cost_usd) FROM llm_call_log")
    assert float(report["cost_usd"]) <= 0.004 + 2 * float(biggest_call)
    assert report["overall"]["missing"] > 0, "what the stopped runs did not read is missing"
