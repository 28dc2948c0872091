"""The API as a real uvicorn process in front of real workers and beat."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = sample_contracts(1)[0]


def put_contract(api: str) -> None:
    response = httpx.put(
        f"{api}/documents/contract-1",
        content=CONTRACT.text.encode(),
        headers={"Content-Type": "text/plain"},
    )
    assert response.status_code in (200, 201), response.text


def test_progress_and_cost_rise_live_while_a_run_executes(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> None:
    fake_llm.configure(latency_ms=[150, 150])
    api = start_api()
    put_contract(api)
    started = httpx.post(f"{api}/documents/contract-1/extract", headers={"Idempotency-Key": "a"})
    assert started.status_code == 202
    run_id = started.json()["run_id"]
    seen: list[tuple[int, float]] = []
    # A text document's extract_text is done as the run is created: the run is seen at
    # steps_done 1 before the worker starts.
    body = httpx.get(f"{api}/runs/{run_id}").json()
    seen.append((body["steps_done"], body["cost_so_far_usd"]))
    start_worker(concurrency=1)
    while True:
        body = httpx.get(f"{api}/runs/{run_id}").json()
        seen.append((body["steps_done"], body["cost_so_far_usd"]))
        if body["status"] == "done":
            break
        time.sleep(0.05)
    steps = [s for s, _ in seen]
    costs = [c for _, c in seen]
    assert steps == sorted(steps) and costs == sorted(costs), "progress never goes back"
    assert steps[0] == 1 and {1, 2, 3, 4} <= set(steps), "every step boundary was visible"
    during_fields = sorted({c for s, c in seen if s == 2})  # extract_text, sections done
    assert len(during_fields) >= 3, "cost rises call by call inside extract_fields, not per step"
    assert body["result"]["extract_fields"]["fields"] == CONTRACT.expected


def test_the_api_killed_between_commit_and_publish_still_gets_the_run_executed(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    crashing = start_api(DOCPIPE_CRASH_AT="api.after_commit")
    put_contract(crashing)
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{crashing}/documents/contract-1/extract", headers={"Idempotency-Key": "k"})
    run_id = str(scalar(db, "SELECT id FROM pipeline_run"))
    assert scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 1
    start_worker()
    start_beat()
    wait_until(lambda: scalar(db, "SELECT status FROM pipeline_run") == "done", timeout_s=60)
    # The client retries its POST with the same key against a healthy API: same run.
    api = start_api()
    again = httpx.post(f"{api}/documents/contract-1/extract", headers={"Idempotency-Key": "k"})
    assert (again.status_code, again.json()["run_id"]) == (202, run_id)
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 1
