"""The provider-batch lane (issue 38) with real workers, beat, PostgreSQL, Redis and the fake
provider's OpenAI batch interface: a batch's calls wait in PostgreSQL while their steps are
parked, go out packed into provider batches, come back answered at half price, and end
done; a provider batch that fails or ends without some answers sends its calls again
without paying twice; a batch the provider created while docpipe did not hear it is found
again, not created twice; a run whose deadline comes close sends its waiting calls in real
time, paid once, and one already near it never waits; one pass wakes at most
DOCPIPE_PROVIDER_BATCH_WAKE_LIMIT parked steps."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

import httpx
import pytest
from fastapi.testclient import TestClient

from docpipe.broker.transport import CeleryPublisher
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.worker.provider_batches import (
    ProviderBatchPass,
    batch_interfaces,
    run_provider_batches,
)
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until
from tests.support.provider_batches import (
    cancel_once_answered,
    column,
    ended,
    first_answered,
    paid_once_after_cancel,
    providers,
    submit,
)


def test_a_batch_through_the_provider_batch_lane_ends_done_at_half_price(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    client = make_api_client()
    batch_id = submit(client, 10)
    # A window of 4 runs: those parked for a provider batch take no slot of it.
    lane_stack(DOCPIPE_BATCH_ADMISSION_WINDOW="4", DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S="10")
    status = ended(client, batch_id)
    assert status["status"] == "done", status
    assert status["runs_by_status"] == {"done": 10}
    # Every answer came through a provider batch, none in real time, each once.
    answered = scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'ok'")
    assert answered == scalar(db, "SELECT count(*) FROM provider_batch_call")
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE status <> 'ok'") == 0
    assert scalar(db, "SELECT count(*) FROM provider_batch_call WHERE state <> 'applied'") == 0
    bill = fake_llm.control("GET", "/control/batches")
    assert bill["processed_twice"] == []
    assert bill["requests_processed"] == answered
    assert fake_llm.stats()["requests_total"] == 0, "nothing was sent in real time"
    # Packed many at a time: fewer provider batches than steps that asked.
    provider_batches = scalar(db, "SELECT count(*) FROM provider_batch")
    with db.session() as session:
        timeline = session.conn.execute(
            b"SELECT b.id, b.model, b.requests, extract(epoch FROM b.created_at - t.created_at)"
            b" AS created_s, extract(epoch FROM b.ended_at - t.created_at) AS ended_s"
            b" FROM provider_batch b CROSS JOIN batch t ORDER BY b.id"
        ).fetchall()
    for row in timeline:
        print("provider batch", {k: str(v) for k, v in row.items()})
    assert 0 < provider_batches < answered
    runs_together = scalar(
        db,
        "SELECT max(n) FROM (SELECT count(DISTINCT run_id) AS n FROM provider_batch_call"
        " GROUP BY provider_batch_id) per_batch",
    )
    assert runs_together > 4, "more runs than the admission window wait at once"
    assert column(db, "SELECT DISTINCT state FROM provider_batch") == ["completed"]
    # Half price: what was paid is half of what the same answers cost in real time.
    paid = scalar(db, "SELECT sum(cost_usd) FROM llm_call_log")
    realtime = scalar(db, "SELECT sum(realtime_cost_usd) FROM provider_batch_call")
    assert paid == pytest.approx(realtime / 2, abs=Decimal("0.000001") * answered)
    assert Decimal(str(status["cost_so_far_usd"])) == pytest.approx(paid)
    assert status["provider_batch"] is True
    assert status["realtime_cost_usd"] == pytest.approx(float(realtime))


def test_a_failed_provider_batch_sends_its_calls_again_without_paying_twice(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    # The first provider batch fails validation; the second ends without a third of its
    # requests (expired); later ones answer. The calls of the first go to the next batch,
    # those left unanswered by the expiry too (DOCPIPE_PROVIDER_BATCH_FALLBACK=next_batch),
    # and past DOCPIPE_PROVIDER_BATCH_MAX_ATTEMPTS a call goes in real time.
    fake_llm.control("POST", "/control/batch-fates", {"kind": "fail"})
    fake_llm.control("POST", "/control/batch-fates", {"kind": "expire", "share": 0.66})
    fake_llm.configure(batch_window_s=3)
    client = make_api_client()
    batch_id = submit(client, 4)
    lane_stack(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="4")
    status = ended(client, batch_id)
    assert status["status"] == "done", status
    assert status["runs_by_status"] == {"done": 4}
    states = column(db, "SELECT state FROM provider_batch ORDER BY id")
    assert states[:2] == ["failed", "expired"], states
    # The calls of the failed batch are on record as errors that cost nothing.
    failed_calls = column(
        db,
        "SELECT g.cost_usd FROM llm_call_log g JOIN provider_batch_call p ON p.call_id = g.id"
        " JOIN provider_batch b ON b.id = p.provider_batch_id WHERE b.state = 'failed'",
    )
    assert failed_calls and set(failed_calls) == {Decimal(0)}
    kinds = column(db, "SELECT DISTINCT error_kind FROM llm_call_log WHERE status = 'error'")
    assert set(kinds) <= {"batch_failed", "batch_expired"}, kinds
    # No request was answered twice, and what the provider answered was paid once.
    bill = fake_llm.control("GET", "/control/batches")
    assert bill["processed_twice"] == []
    paid_batch_calls = scalar(
        db, "SELECT count(*) FROM llm_call_log WHERE status = 'ok' AND cost_usd > 0"
    )
    realtime_calls = fake_llm.stats()["requests_total"]
    assert bill["requests_by_outcome"].get("succeeded", 0) + realtime_calls == paid_batch_calls


@pytest.mark.parametrize("point", ["upload", "create"])
def test_a_batch_created_while_docpipe_did_not_hear_it_is_found_not_made_twice(
    point: str,
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    # The provider stores the first input file (upload) or creates the first batch (create),
    # then the answer is lost, as a crash between the request and its record would lose it:
    # the next pass finds the batch by its metadata, or the file by its name.
    fault = {"point": point, "kind": "500", "after": True}
    fake_llm.control("POST", "/control/batch-faults", fault)
    client = make_api_client()
    batch_id = submit(client, 3)
    lane_stack(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="3")
    status = ended(client, batch_id)
    assert status["status"] == "done", status
    bill = fake_llm.control("GET", "/control/batches")
    assert bill["batches"] == scalar(db, "SELECT count(*) FROM provider_batch")
    assert bill["processed_twice"] == []
    remote_ids = column(db, "SELECT remote_id FROM provider_batch")
    assert len(set(remote_ids)) == len(remote_ids)
    stored = httpx.get(f"{fake_llm.url}/v1/files", params={"purpose": "batch"}, timeout=10)
    assert len(stored.json()["data"]) == len(remote_ids), "one input file per provider batch"


def test_cancelling_a_batch_cancels_its_provider_batch_and_pays_each_answer_once(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    # The provider answers the batch's 4 requests one every 5 s; the docpipe batch is
    # cancelled once the first is answered. The provider batch is cancelled too, and what
    # the provider answered before it stopped is recorded once, at the batch price.
    client = make_api_client()
    batch_id = submit(client, 4)
    fake_llm.configure(batch_completion_s=20)
    lane_stack(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="4")
    cancel_once_answered(client, db, fake_llm, batch_id)
    paid = paid_once_after_cancel(db, fake_llm)
    assert Decimal(str(client.get(f"/batches/{batch_id}").json()["cost_so_far_usd"])) == (
        pytest.approx(paid)
    )


def test_calls_of_a_cancelled_batch_still_waiting_to_be_packed_are_never_sent(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    client = make_api_client()
    batch_id = submit(client, 3)
    # Packed only once 100 calls wait, or after an hour: these 3 wait.
    lane_stack(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="100", DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S="3600")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM provider_batch_call") == 3, timeout_s=120)
    assert client.post(f"/batches/{batch_id}/cancel").status_code == 200
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'sent'") == 0,
        timeout_s=60,
    )
    assert column(db, "SELECT DISTINCT error_kind FROM llm_call_log") == ["not_sent"]
    assert scalar(db, "SELECT sum(cost_usd) FROM llm_call_log") == 0
    assert column(db, "SELECT DISTINCT state FROM provider_batch_call") == ["applied"]
    assert scalar(db, "SELECT count(*) FROM provider_batch") == 0
    assert fake_llm.control("GET", "/control/batches")["requests_received"] == 0


def test_calls_of_a_run_whose_deadline_comes_close_go_in_real_time_and_are_paid_once(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    # The provider answers the 3 requests of the first provider batch one every 10 s. Once it
    # answered one, the runs' deadline is moved to 2 minutes away (as if the hour had
    # passed), nearer than the margin: every call still waiting for the provider batch goes
    # in real time, the provider batch (nobody waits for it now) is cancelled, and the answer
    # it gave anyway is recorded with its cost, never used: each call has one answer.
    client = make_api_client()
    batch_id = submit(client, 3, deadline_s=3600)
    fake_llm.configure(batch_completion_s=30)
    lane_stack(DOCPIPE_PROVIDER_BATCH_MIN_CALLS="3", DOCPIPE_PROVIDER_BATCH_DEADLINE_MARGIN_S="300")
    first_answered(fake_llm)
    with db.session() as s:
        s.conn.execute(b"UPDATE pipeline_run SET deadline_at = now() + interval '120 seconds'")
    status = ended(client, batch_id)
    assert status["status"] == "done", status
    assert status["runs_by_status"] == {"done": 3}
    assert set(column(db, "SELECT state FROM provider_batch")) == {"cancelled"}
    # Each call was answered once for its step: one 'ok' row per call, all in real time.
    answered_twice = scalar(
        db,
        "SELECT count(*) FROM (SELECT 1 FROM llm_call_log WHERE status = 'ok'"
        " GROUP BY run_id, step, generation, call_key HAVING count(*) > 1) twice",
    )
    assert answered_twice == 0
    realtime = scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'ok'")
    assert realtime == fake_llm.stats()["requests_total"] > 3
    # A call switched to real time waits for no other provider batch.
    waited_again = scalar(
        db,
        "SELECT count(*) FROM (SELECT 1 FROM provider_batch_call"
        " GROUP BY run_id, step, generation, call_key HAVING count(*) > 1) again",
    )
    assert waited_again == 0
    # What the provider batch answered before it was cancelled is on record at its price.
    bill = fake_llm.control("GET", "/control/batches")
    assert bill["processed_twice"] == []
    late = column(db, "SELECT cost_usd FROM llm_call_log WHERE error_kind = 'late_answer'")
    assert len(late) == bill["billing"]["batch"]["requests"] >= 1
    assert sum(late) == pytest.approx(
        Decimal(bill["billing"]["batch"]["usd"]), abs=Decimal("0.00001")
    )
    kinds = column(db, "SELECT DISTINCT error_kind FROM llm_call_log WHERE status = 'error'")
    assert set(kinds) == {"deadline_near", "late_answer"}, kinds
    assert scalar(db, "SELECT sum(cost_usd) FROM pipeline_run") == scalar(
        db, "SELECT sum(cost_usd) FROM llm_call_log"
    )
    assert Decimal(str(client.get(f"/batches/{batch_id}").json()["cost_so_far_usd"])) == (
        pytest.approx(scalar(db, "SELECT sum(cost_usd) FROM llm_call_log"))
    )


def test_calls_of_a_run_already_near_its_deadline_go_in_real_time_without_waiting(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
) -> None:
    # The runs must end within 10 minutes, nearer than the 15-minute margin from the start:
    # each call is sent in real time when its step first asks, never recorded as waiting for
    # a provider batch (so no pass of the collector has to switch it first).
    client = make_api_client()
    batch_id = submit(client, 2, deadline_s=600)
    lane_stack(DOCPIPE_PROVIDER_BATCH_DEADLINE_MARGIN_S="900")
    status = ended(client, batch_id)
    assert status["status"] == "done", status
    assert status["runs_by_status"] == {"done": 2}
    assert scalar(db, "SELECT count(*) FROM provider_batch_call") == 0
    assert scalar(db, "SELECT count(*) FROM provider_batch") == 0
    assert column(db, "SELECT DISTINCT status FROM llm_call_log") == ["ok"]
    answered = scalar(db, "SELECT count(*) FROM llm_call_log")
    assert answered == fake_llm.stats()["requests_total"] > 2
    assert fake_llm.control("GET", "/control/batches")["requests_received"] == 0
    # Paid at the real-time price, nothing saved.
    assert Decimal(str(status["cost_so_far_usd"])) == pytest.approx(
        scalar(db, "SELECT sum(cost_usd) FROM llm_call_log")
    )
    assert status["realtime_cost_usd"] == pytest.approx(status["cost_so_far_usd"])


def test_a_pass_wakes_at_most_the_wake_limit_of_parked_steps(
    make_api_client: Callable[..., TestClient],
    db: Database,
    database_url: str,
    fake_llm: FakeLLM,
    lane_stack: Callable[..., None],
    publisher: CeleryPublisher,
) -> None:
    # Beat's own passes never come (an hour apart, after the first): the test runs each pass
    # itself, with DOCPIPE_PROVIDER_BATCH_WAKE_LIMIT=2, so it sees what each one woke. Once
    # woken 2, 2 and 1 apart, the runs' later calls need not come five at a time: a last group
    # of fewer than min_calls is packed after max_wait_s (300 s by default, past the wait
    # below; how the calls group depends on the workers' speed, so on the machine's load).
    client = make_api_client()
    batch_id = submit(client, 5)
    lane_stack(DOCPIPE_PROVIDER_BATCH_INTERVAL_S="3600", DOCPIPE_PROVIDER_BATCH_MIN_CALLS="5")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM provider_batch_call") == 5, timeout_s=120)
    settings = Settings(
        database_url=database_url,
        providers=json.loads(providers(fake_llm, completion_window="1h")),
        provider_batch_min_calls=5,
        provider_batch_max_wait_s=2,
        provider_batch_wake_limit=2,
    )
    interfaces = batch_interfaces(settings)
    passes: list[ProviderBatchPass] = []

    def one_pass() -> ProviderBatchPass:
        passes.append(run_provider_batches(db, publisher, settings, interfaces))
        return passes[-1]

    assert one_pass().packed_calls == 5
    ending = wait_until(lambda: (p := one_pass()).ended and p, timeout_s=60)
    # The provider batch answered its 5 calls: 5 steps are due, 2 are woken now.
    assert (ending.answered, ending.woken) == (5, 2)
    assert one_pass().woken == 2
    assert one_pass().woken == 1
    wait_until(
        lambda: one_pass() and client.get(f"/batches/{batch_id}").json()["status"] != "running",
        timeout_s=180,
    )
    for interface in interfaces.values():
        interface.close()
    assert client.get(f"/batches/{batch_id}").json()["runs_by_status"] == {"done": 5}
    assert max(p.woken for p in passes) == 2
