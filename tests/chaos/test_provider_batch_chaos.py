"""The provider-batch lane under crashes: beat, both workers (one of them runs beat's
provider-batch job, the collector and poller) and once Redis are killed while the job hangs at
a point of a provider batch's life, held there by the fake provider's /control fault;
PostgreSQL crashes once while the poller downloads a provider batch's output. Afterwards every
run is done, no call was paid twice (the provider's bill equals the call log's), and no
provider batch was created twice. Lean: a few documents, provider batches completing in a
second, each scenario well under a minute."""

from __future__ import annotations

import os
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.chaos.invariants import ChaosStack, check_invariants

pytestmark = [pytest.mark.slow, pytest.mark.provider_batches]

# Where the job is held (a request that hangs: the provider acts first only with `after`).
POINTS: dict[str, dict[str, Any]] = {
    "intent recorded, before the upload": {"point": "upload"},
    "batch created, before its record": {"point": "create", "after": True},
    "mid-poll, downloading the output": {"point": "download"},
}


def provider_control() -> httpx.Client:
    return httpx.Client(base_url=os.environ["DOCPIPE_LLM_BASE_URL"].removesuffix("/v1"))


@pytest.mark.timeout(150)
@pytest.mark.parametrize("where", POINTS)
def test_killing_the_provider_batch_job_mid_batch_pays_nothing_twice(
    chaos: ChaosStack, where: str
) -> None:
    fake = provider_control()
    fault = {**POINTS[where], "kind": "hang", "hang_s": 30}
    assert fake.post("/control/batch-faults", json=fault).status_code == 200
    chaos.submit_batch(6, provider_batch=True)
    # The job's request reached the point (the fault is taken) and hangs there: beat and
    # both workers die with it, as they would on a node loss.
    chaos.wait_until(lambda: fake.get("/control/batch-faults").json()["faults"] == [], 60)
    for process in ("beat", "worker-batch", "worker-interactive"):
        chaos.stack.replace(process, kill=True)
    chaos.faults += 1
    name = f"provider batch: workers and beat killed, {where}"
    if POINTS[where]["point"] == "download":
        # Once, Redis restarted empty too: parked steps held no message; woken ones are
        # published again from the outbox.
        chaos.broker.kill()
        time.sleep(1)
        chaos.broker.start()
        chaos.faults += 1
        name += ", Redis restarted empty"
    chaos.wait_for_all_runs(timeout_s=90)
    result = check_invariants(chaos, name)
    assert result.problems == []
    assert result.done == result.runs == 6
    assert_batches_once_and_billed_as_recorded(chaos, fake.get("/control/batches").json())
    fake.close()


@pytest.mark.timeout(120)
def test_postgresql_crashed_mid_poll_pays_nothing_twice(chaos: ChaosStack) -> None:
    """The poller hangs downloading an ended provider batch's output, PostgreSQL crashes
    under it and stays down past the download's timeout: that pass finds its pinned
    connection dead (and the passes after it no server) until PostgreSQL is back; a later
    pass downloads and applies the output once."""
    fake = provider_control()
    fault = {"point": "download", "kind": "hang", "hang_s": 30}
    assert fake.post("/control/batch-faults", json=fault).status_code == 200
    chaos.submit_batch(6, provider_batch=True)
    chaos.wait_until(lambda: fake.get("/control/batch-faults").json()["faults"] == [], 60)
    postgres = chaos.stack.postgres
    assert postgres is not None
    postgres.kill()  # a crash, not a clean shutdown
    # Down longer than the download may take (DOCPIPE_LLM_TIMEOUT_S): the poller gives up
    # on it while there is no database to record anything in.
    time.sleep(float(os.environ["DOCPIPE_LLM_TIMEOUT_S"]) + 2)
    postgres.start()
    chaos.faults += 1
    chaos.wait_for_all_runs(timeout_s=90)
    result = check_invariants(chaos, "provider batch: PostgreSQL crashed mid-poll, restarted")
    assert result.problems == []
    assert result.done == result.runs == 6
    assert_batches_once_and_billed_as_recorded(chaos, fake.get("/control/batches").json())
    fake.close()


def assert_batches_once_and_billed_as_recorded(chaos: ChaosStack, bill: dict[str, Any]) -> None:
    """Each provider batch docpipe recorded is one the provider has, none created twice, no
    request processed twice, and what the provider billed (requests and dollars, in batches
    and in real time) is what the call log paid."""
    remote_ids = [r["remote_id"] for r in chaos.sql("SELECT remote_id FROM provider_batch")]
    assert None not in remote_ids and len(set(remote_ids)) == len(remote_ids) == bill["batches"]
    assert bill["processed_twice"] == []
    assert bill["billing"]["batch"]["requests"] > 0, "the runs went through provider batches"
    billed = bill["billing"]["batch"]["requests"] + bill["billing"]["realtime"]["requests"]
    paid = chaos.sql(
        "SELECT count(*) AS calls, coalesce(sum(cost_usd), 0) AS usd FROM llm_call_log"
        " WHERE cost_usd > 0"
    )[0]
    assert billed == paid["calls"]
    usd = Decimal(bill["billing"]["batch"]["usd"]) + Decimal(bill["billing"]["realtime"]["usd"])
    assert paid["usd"] == pytest.approx(usd, abs=Decimal("0.000001") * paid["calls"])
