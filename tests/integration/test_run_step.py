"""run_step as a plain function (no broker) against the fake provider over HTTP."""

from __future__ import annotations

import re
import signal
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from decimal import Decimal

import jsonschema
import pytest
import redis

from docpipe import interruptions
from docpipe.errors import PermanentLLMError, TransientLLMError
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.evidence import normalised
from docpipe.providers import call_threads as call_threads_module
from docpipe.providers.call_threads import CallThreads
from docpipe.providers.client import ChatRequest, LLMClient
from docpipe.providers.limiter import CallTicket, ProviderLimiter
from docpipe.settings import Settings
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.runs import CreatedRun
from docpipe.worker.executor import StepExecutor, StepOutcome
from docpipe_dev.localstack import free_port
from docpipe_dev.samples import SampleContract, dummy_document, sample_contracts
from tests.support.factories import TENANT, new_run, scalar, script_calls
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

STEP1, STEP2, STEP3 = DOCUMENT_EXTRACT.step_names[1:]  # after extract_text
CONTRACTS = sample_contracts(10)


@pytest.fixture
def llm(fake_llm: FakeLLM, settings: Settings) -> Iterator[LLMClient]:
    client = LLMClient(base_url=fake_llm.url + "/v1", api_key="k", timeout_s=settings.llm_timeout_s)
    yield client
    client.close()


@pytest.fixture
def executor(db: Database, llm: LLMClient, settings: Settings) -> StepExecutor:
    return StepExecutor(db, llm, settings, owner="test-worker")


@dataclass
class HoldingGate:
    """A gate that holds ``hold`` around each call and reserves nothing for a round."""

    hold: Callable[[str, str, int], AbstractContextManager[CallTicket]]

    def slot(
        self, model: str, lane: str, tokens: int = 1, reserved: str | None = None
    ) -> AbstractContextManager[CallTicket]:
        return self.hold(model, lane, tokens)

    def reserve(self, model: str, lane: str, tokens: Sequence[int]) -> list[str]:
        return []

    def unreserve(self, model: str, slot: str, tokens: int) -> None:
        raise AssertionError("nothing was reserved")


def call_count(db: Database, step: str | None = None) -> int:
    return int(
        scalar(
            db, "SELECT count(*) FROM llm_call_log WHERE %s::text IS NULL OR step = %s", step, step
        )
    )


def run_to_the_end(executor: StepExecutor, run_id: str) -> list[str]:
    kinds = []
    for step in DOCUMENT_EXTRACT.step_names[1:]:  # new_run did extract_text
        outcome = executor.run_step(run_id, step)
        kinds.append(outcome.kind)
        if outcome.kind != "completed":
            break
    return kinds


def test_run_step_twice_makes_exactly_one_provider_call(
    db: Database, executor: StepExecutor, fake_llm: FakeLLM
) -> None:
    run = new_run(db, CONTRACTS[0].text)
    first = executor.run_step(run.run_id, STEP1)
    second = executor.run_step(run.run_id, STEP1)
    assert (first.kind, first.calls_sent) == ("completed", 1)
    assert (second.kind, second.calls_sent) == ("already_done", 0)
    assert call_count(db) == 1
    assert fake_llm.stats()["requests_total"] == 1


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: c.slug)
def test_every_sample_contract_goes_through_the_three_steps(
    db: Database, executor: StepExecutor, contract: SampleContract
) -> None:
    run = new_run(db, contract.text, document_id=contract.slug)
    assert run_to_the_end(executor, run.run_id) == ["completed"] * 3
    progress = runs.run_progress(db, TENANT, run.run_id, with_output=True)
    steps = {s.step: s for s in progress.steps}
    outputs = progress.result
    assert outputs is not None
    for step in DOCUMENT_EXTRACT.steps:
        jsonschema.validate(outputs[step.name], step.output_schema)
        assert steps[step.name].prompt_version == step.prompt_version
        assert steps[step.name].model == step.model
    # The fake really reads the text: the fields are the generator's ground truth.
    assert outputs[STEP2]["fields"] == contract.expected
    # Every value's quote was found where the evidence says, on page 1 (plain text).
    evidence = outputs[STEP2]["evidence"]
    assert {e["field"] for e in evidence} == set(contract.expected)
    for e in evidence:
        assert e["supported"] and e["page"] == 1, e
        assert normalised(contract.text[e["start"] : e["end"]]) == normalised(e["quote"])
    sections = outputs[STEP1]["sections"]
    assert call_count(db, STEP2) == len(sections), "one call per section"
    assert contract.expected["parties"][0]["name"] in outputs[STEP3]["summary"]
    # Cost: the run's total is the sum of its calls, and so is each step's.
    total = Decimal(scalar(db, "SELECT sum(cost_usd) FROM llm_call_log"))
    assert total > 0
    assert scalar(db, "SELECT cost_usd FROM pipeline_run") == total
    assert sum(r.cost_usd or 0 for r in steps.values()) == total


def lease_keeper_noticed(caplog: pytest.LogCaptureFixture) -> Callable[[], bool]:
    """True once the lease keeper's renewal found the step's lease gone (another worker's,
    or its run ended) and stopped its calls: it logs so from its own thread."""
    return lambda: re.search(r"lease of \S+ lost", caplog.text) is not None


def wait_is_over(db: Database) -> None:
    """A released step waits out its backoff before it may be claimed again: skip it."""
    with db.session() as s:
        s.conn.execute(b"UPDATE pipeline_step_result SET not_before = now()")


def test_a_value_with_an_invented_quote_is_kept_flagged_and_pauses_the_run_after_its_step(
    db: Database, llm: LLMClient, settings: Settings, fake_llm: FakeLLM
) -> None:
    contract = CONTRACTS[0]
    # One call at a time: the preamble (parties, type, date) is the call the fault meets.
    one_by_one = settings.model_copy(update={"step_call_concurrency": 1})
    executor = StepExecutor(db, llm, one_by_one, owner="test-worker")
    fake_llm.add_fault("invented_quote", count=1, step=STEP2)
    run = new_run(db, contract.text)
    # It pauses after extract_fields: summarize waits for a person's decision.
    assert run_to_the_end(executor, run.run_id) == ["completed", "completed", "stopped"]
    progress = runs.run_progress(db, TENANT, run.run_id, with_output=True)
    assert progress.status == "needs_review"
    assert progress.error == (
        "unsupported_evidence: 3 value(s) their quote does not support: "
        "parties (quote not in the document), contract_type (quote not in the document), "
        "effective_date (quote not in the document)"
    )
    assert progress.review is not None
    assert (progress.review["step"], progress.review["reason"]) == (STEP2, "rule")
    assert [r["kind"] for r in progress.review["reasons"]] == ["unsupported_evidence"]
    assert {s.step: s.status for s in progress.steps}["summarize"] == "pending"
    output = next(s.output for s in progress.steps if s.step == STEP2)
    assert output is not None and output["fields"] == contract.expected  # kept, not dropped
    flagged = {e["field"]: e for e in output["evidence"] if not e["supported"]}
    assert set(flagged) == {"parties", "contract_type", "effective_date"}
    assert all(e["start"] is None and e["page"] is None for e in flagged.values())
    assert sum(e["supported"] for e in output["evidence"]) == len(contract.expected) - 3


@pytest.mark.parametrize("parallel", [1, 4])
def test_a_transient_error_in_step_2_resends_only_the_calls_that_did_not_finish(
    db: Database, llm: LLMClient, settings: Settings, fake_llm: FakeLLM, parallel: int
) -> None:
    sent = 0
    lock = threading.Lock()

    @contextmanager
    def fail_fourth_call(model: str, lane: str, tokens: int) -> Iterator[CallTicket]:
        nonlocal sent
        with lock:
            sent += 1
            if sent == 1 + 4:  # step 1's call, then the fourth section call of step 2
                fake_llm.add_fault("503", count=1, step=STEP2)
        yield CallTicket()

    tuned = settings.model_copy(update={"step_call_concurrency": parallel})
    executor = StepExecutor(db, llm, tuned, gate=HoldingGate(fail_fourth_call))
    run = new_run(db, CONTRACTS[1].text)
    assert executor.run_step(run.run_id, STEP1).kind == "completed"
    sections = len(
        scalar(db, "SELECT output->'sections' FROM pipeline_step_result WHERE step = %s", STEP1)
    )
    outcome = executor.run_step(run.run_id, STEP2)
    assert outcome.kind == "retry"
    failed = scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'error'")
    assert failed == 1
    wait_is_over(db)
    again = executor.run_step(run.run_id, STEP2)
    assert again.kind == "completed"
    # Whatever was answered before the failure is memoised: one call per section in all.
    assert outcome.calls_sent + again.calls_sent == sections + 1
    if parallel == 1:
        assert (outcome.calls_sent, again.calls_sent) == (4, sections - 3)
    else:
        assert (outcome.calls_sent, again.calls_sent) == (sections, 1)
    assert scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = %s", STEP2) == 2


@pytest.mark.parametrize(
    ("kind", "error"), [("429", "rate_limited"), ("500", "server_error"), ("503", "server_error")]
)
def test_429_and_5xx_are_transient(
    db: Database, llm: LLMClient, executor: StepExecutor, fake_llm: FakeLLM, kind: str, error: str
) -> None:
    fake_llm.add_fault(kind, count=1)
    with pytest.raises(TransientLLMError) as caught:
        llm.chat(ChatRequest(model="gpt-4o-mini", messages=_messages(STEP1, CONTRACTS[0].text)))
    assert caught.value.kind == error
    run = new_run(db, CONTRACTS[0].text)
    fake_llm.add_fault(kind, count=1)
    outcome = executor.run_step(run.run_id, STEP1)
    assert outcome.kind == "retry"
    assert scalar(db, "SELECT status FROM pipeline_step_result WHERE step = %s", STEP1) == "pending"
    assert scalar(db, "SELECT error_kind FROM llm_call_log") == error


def test_a_400_is_permanent_and_fails_the_run(
    db: Database, llm: LLMClient, executor: StepExecutor, fake_llm: FakeLLM
) -> None:
    fake_llm.add_fault("400", count=1)
    with pytest.raises(PermanentLLMError):
        llm.chat(ChatRequest(model="gpt-4o-mini", messages=_messages(STEP1, CONTRACTS[0].text)))
    run = new_run(db, CONTRACTS[0].text)
    fake_llm.add_fault("400", count=1)
    outcome = executor.run_step(run.run_id, STEP1)
    assert (outcome.kind, outcome.run_status) == ("failed", "failed")
    assert call_count(db) == 1, "no retry of a permanent error"


def test_an_empty_document_fails_permanently_without_a_call(
    db: Database, executor: StepExecutor
) -> None:
    run = new_run(db, dummy_document().text)
    outcome = executor.run_step(run.run_id, STEP1)
    assert (outcome.kind, outcome.run_status, outcome.calls_sent) == ("failed", "failed", 0)
    assert "empty" in str(scalar(db, "SELECT error FROM pipeline_run"))


def test_invalid_output_goes_to_the_fallback_model(
    db: Database, executor: StepExecutor, fake_llm: FakeLLM
) -> None:
    fake_llm.add_fault("malformed", count=1, step=STEP1, model="gpt-4o-mini")
    run = new_run(db, CONTRACTS[2].text)
    assert executor.run_step(run.run_id, STEP1).kind == "completed"
    with db.session() as s:
        rows = s.conn.execute(b"SELECT model, status FROM llm_call_log ORDER BY id").fetchall()
    assert [(r["model"], r["status"]) for r in rows] == [
        ("gpt-4o-mini", "invalid_output"),
        ("gpt-4o", "ok"),
    ]
    assert scalar(db, "SELECT model FROM pipeline_step_result WHERE step = %s", STEP1) == "gpt-4o"


def test_output_invalid_on_both_models_sends_the_run_to_review(
    db: Database, executor: StepExecutor, fake_llm: FakeLLM
) -> None:
    fake_llm.add_fault("invalid", count=2, step=STEP1)
    run = new_run(db, CONTRACTS[2].text)
    outcome = executor.run_step(run.run_id, STEP1)
    assert (outcome.kind, outcome.run_status) == ("failed", "needs_review")
    assert call_count(db) == 2
    # The tokens of the invalid answers were paid for, and are counted.
    assert scalar(db, "SELECT cost_usd FROM pipeline_run") > 0


def test_transient_errors_past_the_attempt_limit_send_the_run_to_review(
    db: Database, llm: LLMClient, fake_llm: FakeLLM, settings: Settings
) -> None:
    executor = StepExecutor(db, llm, settings.model_copy(update={"max_step_attempts": 2}))
    fake_llm.add_fault("503", count=5, step=STEP1)
    run = new_run(db, CONTRACTS[0].text)
    assert executor.run_step(run.run_id, STEP1).kind == "retry"
    wait_is_over(db)
    outcome = executor.run_step(run.run_id, STEP1)
    assert (outcome.kind, outcome.run_status) == ("failed", "needs_review")
    assert "gave up after 2 attempts" in str(scalar(db, "SELECT error FROM pipeline_run"))


def test_a_lease_held_by_a_dead_worker_is_taken_over_after_it_expires(
    db: Database, executor: StepExecutor, settings: Settings
) -> None:
    run = new_run(db, CONTRACTS[0].text)
    assert runs.claim_step(db, run.run_id, STEP1, owner="dead", lease_s=30) is not None
    assert executor.run_step(run.run_id, STEP1).kind == "busy"
    with db.session() as s:
        s.conn.execute(b"UPDATE pipeline_step_result SET lease_expires_at = now() - interval '1 s'")
    outcome = executor.run_step(run.run_id, STEP1)
    assert outcome.kind == "completed"
    assert scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = %s", STEP1) == 2


class SoftTimeLimit(Exception):
    """Stands for Celery's SoftTimeLimitExceeded: raised in the main thread by a signal."""


def test_calls_on_the_wire_at_the_soft_limit_are_answered_before_the_step_is_handed_on(
    db: Database, llm: LLMClient, settings: Settings, fake_llm: FakeLLM
) -> None:
    tuned = settings.model_copy(update={"step_call_concurrency": 4})
    executor = StepExecutor(db, llm, tuned, interruptions=(SoftTimeLimit,))
    run = new_run(db, CONTRACTS[1].text)
    assert executor.run_step(run.run_id, STEP1).kind == "completed"
    sections = len(
        scalar(db, "SELECT output->'sections' FROM pipeline_step_result WHERE step = %s", STEP1)
    )
    fake_llm.configure(latency_ms=[1000, 1000])

    def interrupt(signum: int, frame: object) -> None:
        raise SoftTimeLimit

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.4)  # while the first four calls are in flight
    try:
        outcome = executor.run_step(run.run_id, STEP2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert (outcome.kind, outcome.calls_sent) == ("retry", 4)
    statuses = scalar(
        db, "SELECT array_agg(status ORDER BY id) FROM llm_call_log WHERE step = %s", STEP2
    )
    assert statuses == ["ok"] * 4, "the interrupted calls were answered and memoised"
    fake_llm.configure(latency_ms=[0, 0])
    wait_is_over(db)
    again = executor.run_step(run.run_id, STEP2)
    assert (again.kind, again.calls_sent) == ("completed", sections - 4)
    assert fake_llm.stats()["by_step"][STEP2] == sections, "no section was paid twice"


def in_a_slot(work: Callable[[], object]) -> None:
    """Run ``work`` in a thread of its own, as a threads worker's slot runs a step (there a
    round's first call runs on the step's thread)."""
    slot = threading.Thread(target=work, name="slot")
    slot.start()
    slot.join(timeout=60)
    assert not slot.is_alive()


def sections_of(db: Database, run_id: str) -> int:
    return int(
        scalar(
            db,
            "SELECT jsonb_array_length(output->'sections') FROM pipeline_step_result"
            " WHERE run_id = %s AND step = %s",
            run_id,
            STEP1,
        )
    )


def two_runs_of_a_long_contract(db: Database) -> tuple[CreatedRun, CreatedRun]:
    """Two runs whose step 2 fans out to more than one round of 4."""
    first, second = (
        new_run(db, CONTRACTS[1].text, document_id=f"doc-{n}", key=f"key-{n}") for n in (1, 2)
    )
    return first, second


def call_statuses(db: Database, run_id: str) -> list[str]:
    return list(
        scalar(
            db,
            "SELECT array_agg(status ORDER BY id) FROM llm_call_log"
            " WHERE run_id = %s AND step = %s",
            run_id,
            STEP2,
        )
    )


def test_two_fan_outs_in_a_row_share_their_call_threads(
    db: Database, llm: LLMClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call threads are the process', reused from one step to the next: two steps' fan-
    outs in a row on one slot use step_call_concurrency threads in all (the slot's own and
    the shared ones), not a new pool's each."""
    monkeypatch.setattr(call_threads_module, "_threads", CallThreads())  # none idle yet
    threads: set[int] = set()

    @contextmanager
    def note_the_thread(model: str, lane: str, tokens: int) -> Iterator[CallTicket]:
        threads.add(threading.get_native_id())  # (never reused while the test runs)
        yield CallTicket()

    tuned = settings.model_copy(update={"step_call_concurrency": 4})
    executor = StepExecutor(db, llm, tuned, gate=HoldingGate(note_the_thread))
    first, second = two_runs_of_a_long_contract(db)
    for run in (first, second):
        assert executor.run_step(run.run_id, STEP1).kind == "completed"
    assert sections_of(db, first.run_id) > 4, "more than one round each"
    threads.clear()
    outcomes: list[StepOutcome] = []
    in_a_slot(lambda: outcomes.extend(executor.run_step(r.run_id, STEP2) for r in (first, second)))
    assert [o.kind for o in outcomes] == ["completed", "completed"]
    assert len(threads) <= 4, f"{len(threads)} threads made the two fan-outs' calls"


def test_an_interrupted_fan_out_stops_its_own_calls_and_not_another_steps(
    db: Database, llm: LLMClient, settings: Settings, fake_llm: FakeLLM
) -> None:
    """Two steps fan out at once in the shared call threads and one of them is interrupted
    (a threads pool's soft limit) while its first round is on the wire: that round is
    answered and memoised, none of its later calls is sent, and the other step's calls all
    run to their answers."""
    tuned = settings.model_copy(update={"step_call_concurrency": 4})
    executor = StepExecutor(db, llm, tuned, interruptions=(SoftTimeLimit,))
    stopped, going = two_runs_of_a_long_contract(db)
    for run in (stopped, going):
        assert executor.run_step(run.run_id, STEP1).kind == "completed"
    sections = sections_of(db, going.run_id)
    assert sections > 4
    fake_llm.configure(latency_ms=[1000, 1000])
    outcomes: dict[str, StepOutcome] = {}
    slots = {
        run.run_id: threading.Thread(
            target=lambda r=run.run_id: outcomes.update({r: executor.run_step(r, STEP2)})
        )
        for run in (stopped, going)
    }
    for slot in slots.values():
        slot.start()
    wait_until(lambda: fake_llm.stats()["in_flight"] == 8, timeout_s=10, every_s=0.02)
    stopped_slot = slots[stopped.run_id].ident
    assert stopped_slot is not None
    interruptions.interrupt(stopped_slot, SoftTimeLimit)  # both first rounds on the wire
    for slot in slots.values():
        slot.join(timeout=60)
    assert (outcomes[stopped.run_id].kind, outcomes[stopped.run_id].calls_sent) == ("retry", 4)
    assert call_statuses(db, stopped.run_id) == ["ok"] * 4, "its round answered and memoised"
    assert (outcomes[going.run_id].kind, outcomes[going.run_id].calls_sent) == (
        "completed",
        sections,
    )
    assert call_statuses(db, going.run_id) == ["ok"] * sections


def test_a_step_that_lost_its_lease_sends_nothing_after_the_limiter_lets_it_through(
    db: Database,
    llm: LLMClient,
    settings: Settings,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = new_run(db, CONTRACTS[0].text)

    @contextmanager
    def slow_gate_while_the_lease_moves(model: str, lane: str, tokens: int) -> Iterator[CallTicket]:
        # Another worker takes the step over while this call waits for the limiter.
        with db.session() as s:
            s.conn.execute(b"UPDATE pipeline_step_result SET lease_owner = 'other-worker'")
        wait_until(lease_keeper_noticed(caplog), timeout_s=10, every_s=0.05)
        yield CallTicket()

    executor = StepExecutor(
        db, llm, settings, owner="me", gate=HoldingGate(slow_gate_while_the_lease_moves)
    )
    outcome = executor.run_step(run.run_id, STEP1)
    assert (outcome.kind, outcome.calls_sent) == ("stopped", 0)
    assert fake_llm.stats()["requests_total"] == 0
    row = scalar(db, "SELECT (status, error_kind, cost_usd)::text FROM llm_call_log")
    assert row == "(error,not_sent,0.000000)"


def test_a_run_cancelled_while_its_call_waits_for_the_limiter_sends_nothing_more(
    db: Database,
    llm: LLMClient,
    settings: Settings,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = new_run(db, CONTRACTS[0].text)

    @contextmanager
    def slow_gate_while_the_run_is_cancelled(
        model: str, lane: str, tokens: int
    ) -> Iterator[CallTicket]:
        assert runs.cancel_run(db, TENANT, run.run_id)
        wait_until(lease_keeper_noticed(caplog), timeout_s=10, every_s=0.05)
        yield CallTicket()

    executor = StepExecutor(
        db, llm, settings, gate=HoldingGate(slow_gate_while_the_run_is_cancelled)
    )
    outcome = executor.run_step(run.run_id, STEP1)
    assert (outcome.kind, outcome.calls_sent) == ("stopped", 0)
    assert fake_llm.stats()["requests_total"] == 0
    assert scalar(db, "SELECT status FROM pipeline_step_result WHERE step = %s", STEP1) == (
        "cancelled"
    )


def test_a_transient_error_after_the_run_was_cancelled_is_not_retried(
    db: Database, llm: LLMClient, settings: Settings, fake_llm: FakeLLM
) -> None:
    run = new_run(db, CONTRACTS[0].text)

    @contextmanager
    def cancel_then_fail(model: str, lane: str, tokens: int) -> Iterator[CallTicket]:
        assert runs.cancel_run(db, TENANT, run.run_id)
        fake_llm.add_fault("503", count=1, step=STEP1)
        yield CallTicket()

    executor = StepExecutor(db, llm, settings, gate=HoldingGate(cancel_then_fail))
    outcome = executor.run_step(run.run_id, STEP1)
    assert outcome.kind == "stopped", "no retry message for a cancelled run"
    assert scalar(db, "SELECT status FROM pipeline_step_result WHERE step = %s", STEP1) == (
        "cancelled"
    )


def _messages(step: str, text: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": DOCUMENT_EXTRACT.step(step).system_prompt},
        {"role": "user", "content": text},
    ]


def test_a_fan_out_over_the_cap_sends_none_of_its_calls_and_goes_to_review(
    db: Database, llm: LLMClient, settings: Settings, fake_llm: FakeLLM
) -> None:
    run = new_run(db, CONTRACTS[0].text)
    assert (
        StepExecutor(db, llm, settings, owner="w").run_step(run.run_id, STEP1).kind == "completed"
    )
    sections = scalar(
        db,
        "SELECT jsonb_array_length(output->'sections') FROM pipeline_step_result WHERE step = %s",
        STEP1,
    )
    capped = settings.model_copy(update={"max_fanout_calls": sections - 1})
    outcome = StepExecutor(db, llm, capped, owner="w").run_step(run.run_id, STEP2)
    assert (outcome.kind, outcome.run_status, outcome.calls_sent) == ("failed", "needs_review", 0)
    assert f"fans out to {sections} calls; the most one fan-out may send is {sections - 1}" in (
        outcome.error or ""
    )
    assert call_count(db, STEP2) == 0
    assert fake_llm.stats()["requests_total"] == 1, "only step 1's call was paid"


def test_a_rounds_calls_take_their_limiter_slots_in_one_script_call(
    db: Database, llm: LLMClient, settings: Settings, fake_llm: FakeLLM, broker: redis.Redis
) -> None:
    tuned = settings.model_copy(
        update={"step_call_concurrency": 4, "provider_rpm": 6000, "provider_max_concurrency": 8}
    )
    limiter = ProviderLimiter(broker, tuned)
    executor = StepExecutor(db, llm, tuned, gate=limiter)
    run = new_run(db, CONTRACTS[1].text)
    assert executor.run_step(run.run_id, STEP1).kind == "completed"  # (loads both scripts)
    sections = len(
        scalar(db, "SELECT output->'sections' FROM pipeline_step_result WHERE step = %s", STEP1)
    )
    assert sections > 4
    before = script_calls(broker)
    outcome = executor.run_step(run.run_id, STEP2)
    assert (outcome.kind, outcome.calls_sent) == ("completed", sections)
    rounds = -(-sections // 4)
    # One script call takes a round's slots, one per call gives its slot back.
    assert script_calls(broker) - before == rounds + sections
    assert limiter.state().in_flight == 0


@pytest.mark.parametrize(("park_over_s", "kind"), [(60.0, "retry"), (2.0, "parked")])
def test_the_executor_chooses_a_countdown_or_a_parked_message_for_the_wait(
    db: Database,
    llm: LLMClient,
    fake_llm: FakeLLM,
    settings: Settings,
    park_over_s: float,
    kind: str,
) -> None:
    tuned = settings.model_copy(update={"park_delays_over_s": park_over_s})
    run = new_run(db, CONTRACTS[0].text)
    fake_llm.add_fault("429", count=1, step=STEP1, retry_after=4.0)
    outcome = StepExecutor(db, llm, tuned, owner="w").run_step(run.run_id, STEP1)
    assert outcome.kind == kind and outcome.retry_in_s is not None and outcome.retry_in_s >= 4
    # A countdown is this message again; a parked wait is a message in PostgreSQL, which
    # the sweep publishes once due (the task asks Celery for nothing).
    assert outcome.countdown_s == (outcome.retry_in_s if kind == "retry" else None)
    parked = scalar(
        db,
        "SELECT count(*) FROM outbox o JOIN pipeline_step_result s USING (run_id, step)"
        " WHERE o.run_id = %s AND o.published_at IS NULL AND o.available_at = s.not_before",
        run.run_id,
    )
    assert parked == (1 if kind == "parked" else 0)
    assert scalar(db, "SELECT status FROM pipeline_step_result WHERE step = %s", STEP1) == "pending"


def test_a_database_out_of_reach_is_a_countdown_that_backs_off(
    llm: LLMClient, settings: Settings
) -> None:
    gone = settings.model_copy(
        update={
            "database_url": f"postgresql://docpipe@127.0.0.1:{free_port()}/docpipe",
            "database_pool_timeout_s": 0.5,
            "retry_backoff_base_s": 1.0,
            "retry_backoff_cap_s": 60.0,
        }
    )
    db = Database.from_settings(gone)
    try:
        executor = StepExecutor(db, llm, gone, owner="w")
        outcome = executor.run_step(str(uuid.uuid4()), STEP1, redelivery=4)
    finally:
        db.close()
    # Nothing could be recorded: this message again, after the fifth delivery's backoff.
    assert outcome.kind == "retry" and outcome.error is not None
    assert outcome.error.startswith("database unavailable")
    assert outcome.countdown_s is not None and 0 <= outcome.countdown_s <= 16
