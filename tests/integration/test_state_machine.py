"""Transitions of runs and steps against real PostgreSQL, without any broker or model."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg
import pytest

from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe.pipelines.catalog import catalog
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state import call_log, runs
from docpipe.state.call_log import CallFinish, CallKey
from docpipe.state.db import Database
from docpipe.state.documents import put_document
from tests.support.factories import TENANT, new_run, scalar
from tests.support.processes import wait_until

# The machine does not care what a step does: these are document_extract's four steps. The
# first, extract_text, is done by create_run for a text document; the others are driven by
# hand here.
TEXT, STEP1, STEP2, STEP3 = DOCUMENT_EXTRACT.step_names


def test_same_idempotency_key_twice_gives_one_run(db: Database) -> None:
    first = new_run(db)
    again = new_run(db)
    assert first.created and not again.created
    assert again.run_id == first.run_id
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 1
    assert scalar(db, "SELECT count(*) FROM outbox") == 1, "a repeat enqueues nothing"


def test_same_key_with_a_different_request_is_a_conflict(db: Database) -> None:
    new_run(db)
    with pytest.raises(ConflictError, match="already used for a different request"):
        new_run(db, lane="batch")
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 1


def test_keys_are_unique_per_tenant_not_globally(db: Database) -> None:
    a = new_run(db)
    b = new_run(db, tenant_id="other")
    assert a.run_id != b.run_id


def test_a_new_run_of_a_text_has_its_text_extracted_and_its_next_step_in_the_outbox(
    db: Database,
) -> None:
    text = "TITLE\nPreamble.\n1. ONE\nText.\n"
    run = new_run(db, text)
    progress = runs.run_progress(db, TENANT, run.run_id, with_output=True)
    assert run.steps_done_at_creation == 1
    assert (progress.status, progress.current_step) == ("queued", STEP1)
    assert (progress.steps_done, progress.steps_total) == (1, 4)
    assert [s.status for s in progress.steps] == ["done", "pending", "pending", "pending"]
    extracted = progress.steps[0]
    # What the worker's extract_text gives a text document, with the step's time and cost.
    assert extracted.output == {
        "format": "text",
        "pages": 1,
        "ocr_pages": 0,
        "characters": len(text),
        "ocr_confidence": None,
        "rotated_pages": [],
        "warnings": [],
    }
    # (attempt 0: no worker claimed it)
    assert (extracted.attempt, extracted.cost_usd, extracted.prompt_version) == (
        0,
        Decimal(0),
        "extract_text@v3",
    )
    assert extracted.started_at is not None and extracted.finished_at is not None
    with db.session() as s:
        [msg] = s.conn.execute(b"SELECT * FROM outbox").fetchall()
    assert (str(msg["run_id"]), msg["step"], msg["queue"]) == (
        run.run_id,
        STEP1,
        "llm_interactive",
    )


def test_batch_runs_wait_for_admission(db: Database) -> None:
    new_run(db, lane="batch")
    assert scalar(db, "SELECT count(*) FROM outbox") == 0
    assert scalar(db, "SELECT admitted_at IS NULL FROM pipeline_run") is True


def test_a_live_lease_makes_a_second_claim_a_no_op(db: Database) -> None:
    run = new_run(db)
    first = runs.claim_step(db, run.run_id, STEP1, owner="w1", lease_s=30)
    assert first is not None and first.attempt == 1
    assert runs.claim_step(db, run.run_id, STEP1, owner="w2", lease_s=30) is None
    assert scalar(db, "SELECT lease_owner FROM pipeline_step_result WHERE step = %s", STEP1) == "w1"
    assert runs.run_progress(db, TENANT, run.run_id).status == "running"


def test_an_expired_lease_lets_another_worker_claim_with_attempt_2(db: Database) -> None:
    run = new_run(db)
    assert runs.claim_step(db, run.run_id, STEP1, owner="dead", lease_s=0.2) is not None
    # Refused until the 0.2 s lease runs out, then taken: polled, not slept.
    second = wait_until(
        lambda: runs.claim_step(db, run.run_id, STEP1, owner="alive", lease_s=30), timeout_s=10
    )
    assert second.attempt == 2
    # The dead worker's late renewal and result are refused: the lease is no longer its own.
    assert not runs.renew_leases(db, [(run.run_id, STEP1)], owner="dead", lease_s=30)
    refused = runs.record_step_result(
        db, second, owner="dead", output={}, model="m", prompt_version="v", next_step=STEP2
    )
    assert refused is None


def test_renewal_extends_only_the_owners_lease(db: Database) -> None:
    run = new_run(db)
    runs.claim_step(db, run.run_id, STEP1, owner="w1", lease_s=0.3)
    assert runs.renew_leases(db, [(run.run_id, STEP1)], owner="w1", lease_s=30) == {
        (run.run_id, STEP1)
    }
    time.sleep(0.4)  # past the first 0.3 s lease: that it has not run out is what is tested
    assert runs.claim_step(db, run.run_id, STEP1, owner="w2", lease_s=30) is None


def test_one_statement_renews_every_lease_still_ours(db: Database) -> None:
    mine = [new_run(db, key=f"k{i}", document_id=f"d{i}").run_id for i in range(3)]
    for run_id in mine:
        assert runs.claim_step(db, run_id, STEP1, owner="w1", lease_s=30) is not None
    taken = runs.claim_step(
        db, new_run(db, key="k9", document_id="d9").run_id, STEP1, owner="w2", lease_s=30
    )
    assert taken is not None
    held = [(run_id, STEP1) for run_id in mine] + [(taken.run_id, STEP1)]
    assert runs.renew_leases(db, held, owner="w1", lease_s=30) == set(held[:3])


def test_a_lease_given_up_is_taken_over_and_its_late_failure_is_refused(db: Database) -> None:
    """A worker gives a step up (its thread passed the hard time limit): another worker may
    claim it at once, and whatever the first one's thread does later changes nothing."""
    run = new_run(db)
    assert runs.claim_step(db, run.run_id, STEP1, owner="w1", lease_s=30) is not None
    assert runs.give_up_lease(db, run.run_id, STEP1, owner="w1", error="given up")
    assert not runs.give_up_lease(db, run.run_id, STEP1, owner="w1", error="given up")
    second = runs.claim_step(db, run.run_id, STEP1, owner="w2", lease_s=30)
    assert second is not None and second.attempt == 2
    assert not runs.fail_run(db, run.run_id, STEP1, owner="w1", status="failed", error="late")
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run.run_id) == "running"


def test_only_the_current_step_can_be_claimed(db: Database) -> None:
    run = new_run(db)
    assert runs.claim_step(db, run.run_id, STEP2, owner="w", lease_s=30) is None


def test_recording_a_result_advances_the_run_and_enqueues_the_next_step(db: Database) -> None:
    run = new_run(db)
    claim = runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30)
    assert claim is not None
    recorded = runs.record_step_result(
        db,
        claim,
        owner="w",
        output={"sections": []},
        model="m",
        prompt_version="p@v1",
        next_step=STEP2,
    )
    assert recorded is not None and recorded.run_status == "running"
    assert [m.step for m in recorded.messages] == [STEP2]
    progress = runs.run_progress(db, TENANT, run.run_id, with_output=True)
    assert (progress.current_step, progress.steps_done) == (STEP2, 2)
    assert progress.steps[1].output == {"sections": []}
    assert progress.steps[1].prompt_version == "p@v1"
    # A redelivered message for the finished step claims nothing.
    assert runs.claim_step(db, run.run_id, STEP1, owner="w2", lease_s=30) is None


def test_the_last_step_finishes_the_run(db: Database) -> None:
    run = new_run(db)
    for step, nxt in ((STEP1, STEP2), (STEP2, STEP3), (STEP3, None)):
        claim = runs.claim_step(db, run.run_id, step, owner="w", lease_s=30)
        assert claim is not None
        runs.record_step_result(
            db, claim, owner="w", output={}, model="m", prompt_version="v", next_step=nxt
        )
    progress = runs.run_progress(db, TENANT, run.run_id)
    assert (progress.status, progress.current_step, progress.steps_done) == ("done", None, 4)
    assert progress.finished_at is not None
    assert progress.result == {TEXT: None, STEP1: None, STEP2: None, STEP3: None}


def test_step_cost_and_tokens_are_the_sum_of_its_calls(db: Database) -> None:
    run = new_run(db)
    claim = runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30)
    assert claim is not None
    request = {
        "provider": "default",
        "route_reason": "only_candidate",
        "seed": None,
        "output_mode": "json_schema",
        "max_tokens": 100,
        "temperature": 0,
    }
    for tokens, cost in ((100, "0.001000"), (50, "0.000500")):
        key = CallKey(
            run_id=run.run_id,
            step=STEP1,
            generation=0,
            call_key=f"k{tokens}",
            step_attempt=1,
            tenant_id=TENANT,
            model="gpt-4o-mini",
            prompt_version="v",
        )
        call_id = call_log.start_call(db, key, request=request)
        finished = CallFinish(
            id=call_id,
            status="ok",
            http_status=200,
            error_kind=None,
            error=None,
            input_tokens=tokens,
            output_tokens=tokens // 10,
            cost_usd=Decimal(cost),
            latency_ms=5,
            response=None,
        )
        call_log.finish_calls(db, [finished], run_id=run.run_id)
    assert str(runs.run_progress(db, TENANT, run.run_id).cost_so_far_usd) == "0.001500"
    runs.record_step_result(
        db, claim, owner="w", output={}, model="gpt-4o-mini", prompt_version="v", next_step=STEP2
    )
    step = runs.run_progress(db, TENANT, run.run_id).steps[1]
    assert (step.input_tokens, step.output_tokens, str(step.cost_usd)) == (
        150,
        15,
        "0.001500",
    )


def test_a_released_step_is_claimable_again_once_its_wait_is_over(db: Database) -> None:
    run = new_run(db)
    runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30)
    assert runs.release_step(
        db, run.run_id, STEP1, owner="w", retry_in_s=5, error="429", worked_s=0.1
    )
    assert not runs.release_step(
        db, run.run_id, STEP1, owner="w", retry_in_s=5, error="twice", worked_s=0.1
    )
    assert runs.claim_step(db, run.run_id, STEP1, owner="w2", lease_s=30) is None, "not yet"
    state = runs.step_state(db, run.run_id, STEP1, lease_s=30)
    assert state is not None and 4 < state.due_in_s <= 5
    with db.session() as s:  # the wait is over
        s.conn.execute(b"UPDATE pipeline_step_result SET not_before = now()")
    again = runs.claim_step(db, run.run_id, STEP1, owner="w2", lease_s=30)
    assert again is not None and again.attempt == 2


def test_a_permanent_failure_ends_the_run(db: Database) -> None:
    run = new_run(db)
    runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30)
    assert runs.fail_run(db, run.run_id, STEP1, owner="w", status="failed", error="empty")
    progress = runs.run_progress(db, TENANT, run.run_id)
    assert (progress.status, progress.error) == ("failed", "empty")
    assert progress.steps[1].status == "failed"
    assert runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30) is None
    assert not runs.fail_run(db, run.run_id, STEP1, owner="w", status="failed", error="again")


def test_cancel_stops_pending_steps_once(db: Database) -> None:
    run = new_run(db)
    assert runs.cancel_run(db, TENANT, run.run_id)
    assert not runs.cancel_run(db, TENANT, run.run_id)
    assert not runs.cancel_run(db, "intruder", run.run_id)
    progress = runs.run_progress(db, TENANT, run.run_id)
    assert progress.status == "cancelled"
    assert [s.status for s in progress.steps] == ["done"] + ["cancelled"] * 3
    assert runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30) is None


def test_a_cancel_waits_for_a_claim_of_the_same_run_instead_of_deadlocking(
    db: Database, database_url: str
) -> None:
    run = new_run(db)
    with psycopg.connect(database_url) as claim, ThreadPoolExecutor(1) as pool:
        # A worker's statement: the step row first, then the run row (claim_step's order).
        claim.execute(
            "UPDATE pipeline_step_result SET deliveries = deliveries"
            " WHERE run_id = %s AND step = %s",
            (run.run_id, STEP1),
        )
        cancelled = pool.submit(runs.cancel_run, db, TENANT, run.run_id)
        wait_until(
            lambda: (
                scalar(
                    db,
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()",
                )
                == 1
            ),
            timeout_s=10,
        )
        # Taking the run row now deadlocked when the cancel held it (the cancel's own order).
        claim.execute("UPDATE pipeline_run SET updated_at = now() WHERE id = %s", (run.run_id,))
        claim.commit()
        assert cancelled.result(timeout=10)
    assert runs.run_progress(db, TENANT, run.run_id).status == "cancelled"


def test_a_run_past_its_deadline_is_not_claimed_and_expires(db: Database) -> None:
    run = new_run(db, deadline_at=datetime.now(UTC) - timedelta(seconds=1))
    assert runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30) is None
    assert runs.expire_run(db, run.run_id)
    assert runs.run_progress(db, TENANT, run.run_id).status == "expired"


def test_restart_from_a_step_keeps_earlier_results_and_bumps_the_generation(db: Database) -> None:
    run = new_run(db)
    for step, nxt in ((STEP1, STEP2), (STEP2, STEP3), (STEP3, None)):
        claim = runs.claim_step(db, run.run_id, step, owner="w", lease_s=30)
        assert claim is not None
        runs.record_step_result(
            db,
            claim,
            owner="w",
            output={"step": step},
            model="m",
            prompt_version="v",
            next_step=nxt,
        )
    restarted = runs.restart_run(db, TENANT, run.run_id, STEP2, pipelines=catalog())
    assert len(restarted.outbox_ids) == 1
    progress = runs.run_progress(db, TENANT, run.run_id, with_output=True)
    assert (progress.status, progress.current_step, progress.steps_done) == ("queued", STEP2, 2)
    assert [(s.status, s.generation) for s in progress.steps] == [
        ("done", 0),
        ("done", 0),
        ("pending", 1),
        ("pending", 1),
    ]
    assert progress.steps[1].output == {"step": STEP1}


def test_restart_refuses_active_runs_and_unknown_steps(db: Database) -> None:
    run = new_run(db)
    with pytest.raises(ConflictError, match="only ended runs restart"):
        runs.restart_run(db, TENANT, run.run_id, STEP1, pipelines=catalog())
    runs.cancel_run(db, TENANT, run.run_id)
    with pytest.raises(ConflictError, match="an earlier step is not done"):
        runs.restart_run(db, TENANT, run.run_id, STEP3, pipelines=catalog())
    with pytest.raises(ConflictError, match="has no step"):
        runs.restart_run(db, TENANT, run.run_id, "nope", pipelines=catalog())


def test_unknown_runs_and_other_tenants_runs_are_not_found(db: Database) -> None:
    run = new_run(db)
    with pytest.raises(NotFoundError):
        runs.run_progress(db, "other-tenant", run.run_id)
    with pytest.raises(NotFoundError):
        runs.run_progress(db, TENANT, "not-a-uuid")


def test_documents_are_immutable(db: Database) -> None:
    with db.session() as s:
        first = put_document(s, TENANT, "d", "text")
        again = put_document(s, TENANT, "d", "text")
        assert first.created and not again.created
        with pytest.raises(ConflictError, match="immutable"):
            put_document(s, TENANT, "d", "other text")
        with pytest.raises(InvalidRequestError, match="document id"):
            put_document(s, TENANT, "../etc/passwd", "x")


def parked_messages(db: Database, run_id: str) -> list[dict[str, object]]:
    """The run's unpublished outbox rows that wait for a time to come."""
    with db.session() as s:
        return s.conn.execute(
            b"SELECT step, available_at FROM outbox"
            b" WHERE run_id = %s AND published_at IS NULL AND available_at > now()",
            (run_id,),
        ).fetchall()


def test_a_parked_release_writes_its_message_with_the_step_and_never_for_an_ended_run(
    db: Database,
) -> None:
    run = new_run(db)
    runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30)
    assert runs.release_step(
        db, run.run_id, STEP1, owner="w", retry_in_s=90, error="429", worked_s=0.1, park=True
    )
    [parked] = parked_messages(db, run.run_id)
    not_before = scalar(
        db,
        "SELECT not_before FROM pipeline_step_result WHERE run_id = %s AND step = %s",
        run.run_id,
        STEP1,
    )
    assert (parked["step"], parked["available_at"]) == (STEP1, not_before)
    # The run ends while a second attempt runs: its hand-back writes nothing.
    with db.session() as s:
        s.conn.execute(b"UPDATE pipeline_step_result SET not_before = now()")
        s.conn.execute(b"DELETE FROM outbox")
    runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30)
    assert runs.cancel_run(db, TENANT, run.run_id)
    assert not runs.release_step(
        db, run.run_id, STEP1, owner="w", retry_in_s=90, error="429", worked_s=0.1, park=True
    )
    assert parked_messages(db, run.run_id) == []
