"""Budgets in the provider-batch lane (issue 38), with real workers, beat, PostgreSQL, Redis
and the fake provider: a call waiting for a provider batch reserves its estimated cost at
the batch price, which budget checks count beside what was spent, so a batch budget lets
through as many calls as the discount pays for, and still stops the work past it; a call
that goes in real time because its run's deadline is near is checked at the real-time
price."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from fastapi.testclient import TestClient

from docpipe.state.call_log import CallCheck, CallKey, check_and_start_calls
from docpipe.state.db import Database
from tests.support.factories import TENANT, new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until
from tests.support.provider_batches import column, ended, providers, submit

DOCUMENTS = 6
# A call's request as its row records it (PlannedCall.log_params).
REQUEST = {
    "provider": "default",
    "route_reason": None,
    "output_mode": "json_schema",
    "max_tokens": 100,
    "temperature": 0,
    "seed": None,
}


def open_reservations(db: Database) -> Decimal:
    return Decimal(
        scalar(
            db,
            "SELECT coalesce(sum(reserved_usd), 0) FROM provider_batch_call"
            " WHERE state IN ('waiting', 'packed', 'answered')",
        )
    )


def test_a_batch_budget_is_reserved_at_the_batch_price(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    # A tenth of the price in provider batches, and a budget that pays for two first calls
    # at the real-time price: all six runs' first calls wait, reserved at the batch price.
    client = make_api_client()
    budget = Decimal("0.003")
    batch_id = submit(client, DOCUMENTS, budget_usd=str(budget))
    lane_stack(
        providers(fake_llm, discount="0.1"),
        DOCPIPE_PROVIDER_BATCH_MIN_CALLS="100",
        DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S="3600",
    )
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM provider_batch_call") == DOCUMENTS,
        timeout_s=120,
    )
    reserved = open_reservations(db)
    held = Decimal(scalar(db, "SELECT reserved_usd FROM batch WHERE id = %s", batch_id))
    assert held == reserved > 0, "the batch holds what its waiting calls reserved"
    shown = client.get(f"/batches/{batch_id}").json()
    assert Decimal(str(shown["reserved_usd"])) == reserved
    assert shown["cost_so_far_usd"] == 0
    assert reserved <= budget
    assert reserved / Decimal("0.1") > budget, "at the real-time price they would not all fit"
    assert column(db, "SELECT DISTINCT status FROM pipeline_run") == ["running"]
    assert scalar(db, "SELECT sum(cost_usd) FROM llm_call_log") == 0, "nothing paid yet"
    # Cancelled, the runs' waits close: the batch holds nothing any more.
    assert client.post(f"/batches/{batch_id}/cancel").status_code == 200
    wait_until(lambda: open_reservations(db) == 0, timeout_s=60)
    assert scalar(db, "SELECT reserved_usd FROM batch WHERE id = %s", batch_id) == 0


def test_a_batch_budget_still_stops_the_work_past_it(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    # At half price the budget pays for the estimate of one first call of six (the six
    # would cost more than the budget, answered): the others are refused before they wait,
    # the batch ends budget_exceeded, and what was paid (answers of provider batches
    # included, even those that came after the batch stopped) stays within the budget, since
    # each call was reserved before it was sent.
    client = make_api_client()
    budget = Decimal("0.001")
    batch_id = submit(client, DOCUMENTS, budget_usd=str(budget))
    lane_stack(providers(fake_llm, discount="0.5"), DOCPIPE_PROVIDER_BATCH_MIN_CALLS="3")
    status = ended(client, batch_id)
    assert status["status"] == "budget_exceeded", status
    assert status["runs_by_status"].get("budget_exceeded", 0) > 0
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'sent'") == 0,
        timeout_s=120,
    )
    paid = Decimal(scalar(db, "SELECT coalesce(sum(cost_usd), 0) FROM llm_call_log"))
    assert paid <= budget
    assert Decimal(str(client.get(f"/batches/{batch_id}").json()["cost_so_far_usd"])) == paid
    assert fake_llm.stats()["requests_total"] == 0, "nothing was sent in real time"
    bill = fake_llm.control("GET", "/control/batches")
    assert bill["processed_twice"] == []
    wait_until(lambda: open_reservations(db) == 0, timeout_s=60)
    assert scalar(db, "SELECT reserved_usd FROM batch WHERE id = %s", batch_id) == 0


def test_a_call_of_a_run_near_its_deadline_is_checked_at_the_real_time_price(
    db: Database,
) -> None:
    # A lane run with a budget of 0.008 whose deadline is 10 minutes away, and a call
    # estimated at 0.01 in real time, 0.005 at the batch price. With a 15-minute margin the
    # call would go in real time: the budget refuses it. With a 1-minute margin it may wait
    # for a provider batch, checked at the batch price: it fits.
    run = new_run(db, key="near-deadline")
    with db.session() as s:
        s.conn.execute(
            b"UPDATE pipeline_run SET provider_batch = true, budget_usd = 0.008,"
            b" deadline_at = now() + interval '10 minutes' WHERE id = %s",
            (run.run_id,),
        )

    def check(call_key: str, margin_s: float) -> CallCheck:
        key = CallKey(run.run_id, "extract_fields", 0, call_key, 1, TENANT, "m", "v1")
        [checked] = check_and_start_calls(
            db,
            [key],
            owner=None,
            requests=[REQUEST],
            estimated_costs_usd=[Decimal("0.01")],
            step_budget_usd=None,
            batch_costs_usd=[Decimal("0.005")],
            deadline_margin_s=margin_s,
        )
        return checked

    near = check("section:1", 900)
    assert near.deadline_near and near.call_id is None
    far = check("section:2", 60)
    assert not far.deadline_near and far.call_id is not None
