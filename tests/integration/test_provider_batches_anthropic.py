"""The provider-batch lane through Anthropic's Message Batches (``batch.interface:
anthropic``), with real workers, beat, PostgreSQL, Redis and the fake provider's Message
Batches: answers come back as Messages and are validated and recorded as the OpenAI
interface's are, at half price; a batch created while docpipe did not hear it is found
again among the provider's batches, not created twice; errored requests are classified as
the same errors in real time would be; a cancelled batch cancels its message batch."""

from __future__ import annotations

import functools
from collections.abc import Callable
from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.provider_batches import (
    cancel_once_answered,
    column,
    ended,
    paid_once_after_cancel,
    providers,
    submit,
)


@pytest.fixture
def anthropic_lane(fake_llm: FakeLLM, lane_stack: Callable[..., None]) -> Callable[..., None]:
    """The lane's stack with Anthropic's Message Batches as the fake provider's batch
    interface (real time stays on its chat completions)."""
    claude = providers(fake_llm, "claude", interface="anthropic", max_requests=100)
    return functools.partial(lane_stack, claude)


def test_a_batch_through_anthropic_message_batches_ends_done_at_half_price(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    anthropic_lane: Callable[..., None],
) -> None:
    client = make_api_client()
    batch_id = submit(client, 4)
    anthropic_lane(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="4")
    status = ended(client, batch_id)
    assert status["status"] == "done", status
    assert status["runs_by_status"] == {"done": 4}
    # Every answer came through a message batch, none in real time, each once.
    answered = scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'ok'")
    assert answered == scalar(db, "SELECT count(*) FROM provider_batch_call") > 4
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE status <> 'ok'") == 0
    bill = fake_llm.control("GET", "/control/batches")
    assert bill["processed_twice"] == []
    assert bill["requests_processed"] == answered
    assert fake_llm.stats()["requests_total"] == 0, "nothing was sent in real time"
    remote = column(db, "SELECT remote_id FROM provider_batch ORDER BY id")
    assert remote and all(r.startswith("msgbatch_") for r in remote), remote
    assert column(db, "SELECT DISTINCT state FROM provider_batch") == ["completed"]
    # Half price, and what docpipe recorded is what the provider billed.
    paid = scalar(db, "SELECT sum(cost_usd) FROM llm_call_log")
    realtime = scalar(db, "SELECT sum(realtime_cost_usd) FROM provider_batch_call")
    assert paid == pytest.approx(realtime / 2, abs=Decimal("0.000001") * answered)
    assert paid == pytest.approx(Decimal(bill["billing"]["batch"]["usd"]), abs=Decimal("0.00001"))
    assert Decimal(str(status["cost_so_far_usd"])) == pytest.approx(paid)
    assert status["realtime_cost_usd"] == pytest.approx(float(realtime))


def test_an_anthropic_batch_created_while_docpipe_did_not_hear_it_is_found_not_made_twice(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    anthropic_lane: Callable[..., None],
) -> None:
    # The provider creates the first message batch, then its answer is lost (as a crash
    # between the request and its record would lose it). Anthropic keeps no metadata: the
    # next pass finds it among the batches created since the intent, by its size.
    fault = {"point": "create", "kind": "500", "after": True}
    fake_llm.control("POST", "/control/batch-faults", fault)
    client = make_api_client()
    batch_id = submit(client, 3)
    anthropic_lane(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="3")
    status = ended(client, batch_id)
    assert status["status"] == "done", status
    bill = fake_llm.control("GET", "/control/batches")
    assert bill["batches"] == scalar(db, "SELECT count(*) FROM provider_batch") >= 2
    assert bill["processed_twice"] == []
    assert bill["requests_received"] == scalar(db, "SELECT count(*) FROM provider_batch_call")
    ids = column(db, "SELECT remote_id FROM provider_batch")
    assert len(set(ids)) == len(ids)
    assert fake_llm.stats()["requests_total"] == 0, "nothing was sent in real time"


def test_errored_requests_of_an_anthropic_batch_are_classified_as_in_real_time(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    anthropic_lane: Callable[..., None],
) -> None:
    # In the first message batch one request errors invalid_request_error (400: permanent,
    # sent in real time, where it is classified as every call is); in the second one errors
    # api_error (500: transient, sent in the next message batch).
    fake_llm.control("POST", "/control/batch-fates", {"kind": "errors", "status": 400})
    fake_llm.control("POST", "/control/batch-fates", {"kind": "errors", "status": 500})
    client = make_api_client()
    batch_id = submit(client, 3)
    anthropic_lane(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="3")
    status = ended(client, batch_id)
    assert status["status"] == "done", status
    errors = column(
        db,
        "SELECT g.error_kind FROM llm_call_log g JOIN provider_batch_call p ON p.call_id = g.id"
        " WHERE g.status = 'error' ORDER BY g.id",
    )
    assert errors == ["bad_request", "server_error"], errors
    # The permanent one went in real time (once), the transient one to a later batch.
    assert fake_llm.stats()["requests_total"] == 1
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'ok'") == (
        scalar(db, "SELECT count(*) FROM provider_batch_call") - 2 + 1
    )
    # Nothing errored was paid; what was answered was paid once.
    assert scalar(db, "SELECT sum(cost_usd) FROM llm_call_log WHERE status = 'error'") == 0
    bill = fake_llm.control("GET", "/control/batches")
    assert bill["processed_twice"] == []
    assert bill["requests_by_outcome"] == {
        "succeeded": scalar(db, "SELECT count(*) FROM provider_batch_call") - 2,
        "errored": 2,
    }


def test_cancelling_a_batch_cancels_its_message_batch_and_pays_each_answer_once(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    anthropic_lane: Callable[..., None],
) -> None:
    # The provider answers the message batch's 4 requests one every 5 s; the docpipe batch
    # is cancelled once the first is answered. The message batch is cancelled too (ended
    # with cancel_initiated_at: docpipe's 'cancelled'), and what the provider answered
    # before it stopped is recorded once, at the batch price.
    client = make_api_client()
    batch_id = submit(client, 4)
    fake_llm.configure(batch_completion_s=20)
    anthropic_lane(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="4")
    cancel_once_answered(client, db, fake_llm, batch_id)
    paid_once_after_cancel(db, fake_llm)
