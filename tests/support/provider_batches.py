"""What the provider-batch lane's integration tests share: the providers file, the stack
that serves the lane (a batch worker and beat), a batch of sample contracts through it, and
the cancel of a batch once its provider batch has answered a request."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docpipe.settings.providers import DEFAULT_PRICES
from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACTS = sample_contracts(10)


def providers(fake: FakeLLM, name: str = "fake", **batch: object) -> str:
    """DOCPIPE_PROVIDERS: the fake provider as ``name``, at docpipe's default prices, with
    the batch interface ``batch`` declares (``interface``, ``discount``, limits, window)."""
    models = {
        model: {"input_per_mtok": str(p.input_per_mtok), "output_per_mtok": str(p.output_per_mtok)}
        for model, p in DEFAULT_PRICES.items()
    }
    return json.dumps(
        [{"name": name, "base_url": fake.url + "/v1", "models": models, "batch": batch}]
    )


@pytest.fixture
def lane_stack(
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> Callable[..., None]:
    """Starts a batch worker and beat for the lane: ``providers_json`` is DOCPIPE_PROVIDERS
    (the fake provider's OpenAI interface unless given), ``env`` any DOCPIPE_* setting over
    the lane's quick passes. The fake provider completes a provider batch in a second unless
    the test configures it otherwise before the stack starts: the first pass may pack, and
    the provider validate (when it schedules the answers), within a second of beat's start."""

    def start(providers_json: str | None = None, **env: str) -> None:
        settings = {
            "DOCPIPE_PROVIDERS": providers_json or providers(fake_llm, completion_window="1h"),
            "DOCPIPE_BATCH_ADMISSION_WINDOW": "10",
            "DOCPIPE_PROVIDER_BATCH_INTERVAL_S": "0.5",
            "DOCPIPE_PROVIDER_BATCH_MIN_CALLS": "10",
            "DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S": "2",
            **env,
        }
        start_worker("batch", concurrency=2, **settings)
        start_beat(**settings)

    fake_llm.configure(batch_completion_s=1)
    return start


def submit(client: TestClient, count: int, **options: Any) -> str:
    """A batch of the first ``count`` sample contracts (documents pb-0, pb-1, ...) through the
    lane, with any other field of the batch request (``deadline_s``, ``budget_usd``)."""
    documents = [{"id": f"pb-{i}", "text": CONTRACTS[i].text} for i in range(count)]
    body = {"documents": documents, "provider_batch": True, **options}
    response = client.post("/batches", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["batch_id"])


def ended(client: TestClient, batch_id: str) -> dict[str, Any]:
    wait_until(
        lambda: client.get(f"/batches/{batch_id}").json()["status"] != "running", timeout_s=240
    )
    status: dict[str, Any] = client.get(f"/batches/{batch_id}").json()
    return status


def column(db: Database, sql: str, *params: Any) -> list[Any]:
    with db.session() as s:
        return [next(iter(r.values())) for r in s.conn.execute(sql.encode(), params).fetchall()]


def first_answered(fake: FakeLLM) -> None:
    """Until the provider has answered a request of a provider batch."""
    wait_until(
        lambda: fake.control("GET", "/control/batches")["requests_processed"] >= 1,
        timeout_s=120,
    )


def cancel_once_answered(client: TestClient, db: Database, fake: FakeLLM, batch_id: str) -> None:
    """Once the provider answered the first request of a provider batch (the test has it
    answer slowly), the docpipe batch is cancelled, until no provider batch is left
    submitted."""
    first_answered(fake)
    assert client.post(f"/batches/{batch_id}/cancel").status_code == 200
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM provider_batch WHERE state = 'submitted'") == 0,
        timeout_s=120,
    )


def paid_once_after_cancel(db: Database, fake: FakeLLM) -> Decimal:
    """What cancel_once_answered leaves of a batch of 4 requests in one provider batch: the
    provider batch cancelled, what the provider answered before it stopped recorded once at
    the batch price (returned), the rest ended batch_cancelled."""
    assert column(db, "SELECT state FROM provider_batch") == ["cancelled"]
    bill = fake.control("GET", "/control/batches")
    assert bill["by_status"] == {"cancelled": 1}
    assert bill["processed_twice"] == []
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'sent'") == 0
    answered = scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'ok'")
    assert answered == bill["billing"]["batch"]["requests"] >= 1
    assert 4 - answered == scalar(
        db, "SELECT count(*) FROM llm_call_log WHERE error_kind = 'batch_cancelled'"
    )
    paid = scalar(db, "SELECT sum(cost_usd) FROM llm_call_log")
    assert paid == pytest.approx(Decimal(bill["billing"]["batch"]["usd"]), abs=Decimal("0.00001"))
    return paid
