"""Answer reuse, opt-in for ordinary runs (issue 34, item 4): a run or batch that asks for
it takes the tenant's earlier answer to the very same request instead of sending it, and
records where it came from; a run that does not ask sends its calls as always, and another
tenant's answer to the same request is never taken. Real PostgreSQL, Redis, an interactive
worker and the fake provider (its request counts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = sample_contracts(1)[0]


def extracted(client: TestClient, **options: Any) -> str:
    """A run of the contract, once it is done."""
    started = client.post("/documents/contract/extract", json=options)
    assert started.status_code == 202, started.text
    run_id: str = started.json()["run_id"]
    wait_until(lambda: client.get(f"/runs/{run_id}").json()["status"] == "done", timeout_s=120)
    return run_id


def sent(fake_llm: FakeLLM) -> int:
    return int(fake_llm.stats()["requests_total"])


def test_a_run_that_opts_in_reuses_the_tenants_answers_and_one_that_does_not_pays(
    make_api_client: Callable[..., TestClient],
    start_worker: Callable[..., ManagedProcess],
    fake_llm: FakeLLM,
    db: Database,
) -> None:
    start_worker("interactive", concurrency=2)
    client = make_api_client()
    stored = client.put(
        "/documents/contract", content=CONTRACT.text, headers={"Content-Type": "text/plain"}
    )
    assert stored.status_code == 201, stored.text

    first = extracted(client, reuse_answers=True)  # nothing to reuse yet: it pays, and keeps
    paid = sent(fake_llm)
    assert paid > 0
    fake_llm.reset()  # zeroes its counters
    second = extracted(client, reuse_answers=True)
    assert sent(fake_llm) == 0, "every call of the second run was answered from the first's"
    calls = scalar(db, "SELECT count(*) FROM llm_call_log WHERE run_id = %s", second)
    reused = scalar(
        db,
        "SELECT count(*) FROM reused_answer u JOIN llm_call_log p ON p.id = u.reused_from"
        " WHERE u.run_id = %s AND p.run_id = %s",
        second,
        first,
    )
    assert calls == paid and reused == paid, "each reuse names the call it came from"
    assert scalar(db, "SELECT sum(cost_usd) FROM llm_call_log WHERE run_id = %s", second) == 0
    shown, source = client.get(f"/runs/{second}").json(), client.get(f"/runs/{first}").json()
    assert shown["result"] == source["result"]
    # The run shows it too: each step's calls, each with the call and run it reused.
    reuses = [call for step in shown["steps"] for call in step["reused_calls"]]
    assert len(reuses) == paid and {c["reused_from_run"] for c in reuses} == {first}
    first_calls = scalar(
        db, "SELECT array_agg(id ORDER BY id) FROM llm_call_log WHERE run_id = %s", first
    )
    assert sorted(c["reused_from"] for c in reuses) == first_calls
    assert all(step["reused_calls"] == [] for step in source["steps"]), "the first one paid"

    extracted(client)  # not opted in: it sends its calls as always
    assert sent(fake_llm) == paid


def test_the_option_is_part_of_a_requests_identity_and_a_batch_passes_it_to_its_runs(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    client.put(
        "/documents/contract", content=CONTRACT.text, headers={"Content-Type": "text/plain"}
    ).raise_for_status()
    key = {"Idempotency-Key": "k-1"}
    assert client.post("/documents/contract/extract", json={}, headers=key).status_code == 202
    again = client.post("/documents/contract/extract", json={"reuse_answers": False}, headers=key)
    assert again.status_code == 202 and again.json()["created"] is False
    other = client.post("/documents/contract/extract", json={"reuse_answers": True}, headers=key)
    assert other.status_code == 409, other.text
    refused = client.post("/documents/contract/extract", json={"reuse_answers": "yes"})
    assert refused.status_code == 422, refused.text

    documents = [{"id": "contract"}, {"id": "other", "text": CONTRACT.text}]
    batch = client.post("/batches", json={"documents": documents, "reuse_answers": True})
    assert batch.status_code == 202, batch.text
    plain = client.post("/batches", json={"documents": documents})
    assert plain.status_code == 202, plain.text
    for batch_id, reusing in ((batch.json()["batch_id"], 2), (plain.json()["batch_id"], 0)):
        found = scalar(
            db,
            "SELECT count(*) FILTER (WHERE reuse_answers) FROM pipeline_run WHERE batch_id = %s",
            batch_id,
        )
        assert found == reusing
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE reuse_answers") == 2


def test_another_tenants_identical_request_is_sent_not_reused(
    make_api_client: Callable[..., TestClient],
    start_worker: Callable[..., ManagedProcess],
    fake_llm: FakeLLM,
    db: Database,
) -> None:
    start_worker("interactive", concurrency=2)
    client = make_api_client(auth="keys", api_key_rpm=0)
    for tenant in ("acme", "globex"):
        key = create_api_key(db, tenant, tenant[0]).plaintext
        client.headers["Authorization"] = f"Bearer {key}"
        stored = client.put(
            "/documents/contract", content=CONTRACT.text, headers={"Content-Type": "text/plain"}
        )
        assert stored.status_code == 201, stored.text
        fake_llm.reset()  # zeroes its counters
        extracted(client, reuse_answers=True)
        # The very same requests (model, parameters, messages, schema): globex's go out too.
        assert sent(fake_llm) > 0, f"{tenant} sent its calls"
    assert scalar(db, "SELECT count(*) FROM reused_answer") == 0
    assert scalar(db, "SELECT count(DISTINCT tenant_id) FROM answered_request") == 2
