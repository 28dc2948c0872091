"""Runs executed by real `celery worker` and `celery beat` processes, killed on purpose.

Acceptance of seed 000 task 15.1: a killed worker resumes at step 2 without re-running
step 1; SIGTERM loses nothing; 429s are retried with backoff; an empty document fails at
once; recovery never waits for the broker's visibility timeout.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime

from docpipe.broker.transport import CeleryPublisher
from docpipe.broker.transport import app as celery_app
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = sample_contracts(1)[0]
StartWorker = Callable[..., ManagedProcess]


def submit(
    db: Database, publisher: CeleryPublisher, text: str = CONTRACT.text, key: str = "k"
) -> str:
    created = new_run(db, text, key=key, document_id=f"doc-{key}")
    publish_outbox(db, publisher, created.outbox_ids)
    return created.run_id


def status(db: Database, run_id: str) -> str:
    return str(scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id))


def wait_for_end(db: Database, run_id: str, timeout_s: float = 60) -> str:
    wait_until(lambda: status(db, run_id) not in ("queued", "running"), timeout_s)
    return status(db, run_id)


def step_field(db: Database, step: str, column: str) -> object:
    return scalar(db, f"SELECT {column} FROM pipeline_step_result WHERE step = %s", step)


def calls(db: Database, run_id: str, step: str, state: str | None = None) -> int:
    return int(
        scalar(
            db,
            "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND step = %s"
            " AND (%s::text IS NULL OR status = %s)",
            run_id,
            step,
            state,
            state,
        )
    )


def test_a_run_goes_through_all_steps_on_real_workers(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    start_worker()
    run_id = submit(db, publisher)
    assert wait_for_end(db, run_id) == "done"
    assert calls(db, run_id, "extract_sections") == 1
    assert calls(db, run_id, "summarize") == 1
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE status <> 'ok'") == 0
    assert scalar(db, "SELECT steps_done FROM pipeline_run") == 4  # extract_text and 3 more


def test_killed_worker_resumes_at_step_2_without_repaying_step_1(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    fake_llm.control("POST", "/control/config", json={"latency_ms": [250, 250]})
    start_beat()
    worker = start_worker(concurrency=1)
    run_id = submit(db, publisher)
    wait_until(lambda: calls(db, run_id, "extract_fields", "ok") >= 2, timeout_s=30)

    worker.kill_group()  # SIGKILL the parent and its pool children mid-step-2
    killed_at = time.time()
    start_worker(concurrency=1)

    resumed_at = wait_until(
        lambda: (
            scalar(
                db,
                "SELECT extract(epoch FROM started_at) FROM pipeline_step_result"
                " WHERE step = 'extract_fields' AND attempt = 2",
            )
            if scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = 'extract_fields'")
            >= 2
            else None
        ),
        timeout_s=30,
    )
    assert wait_for_end(db, run_id) == "done"
    assert calls(db, run_id, "extract_sections") == 1, "step 1 must not run again"
    assert scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = 'extract_fields'") == 2
    assert (
        scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = 'extract_sections'") == 1
    )
    # Calls that finished before the kill are memoised: each section was answered once.
    assert (
        scalar(
            db,
            "SELECT max(n) FROM (SELECT count(*) AS n FROM llm_call_log"
            " WHERE step = 'extract_fields' AND status = 'ok' GROUP BY call_key) per_call",
        )
        == 1
    )
    # At most the calls in flight at the kill (the step's parallelism) were sent again.
    sections = scalar(
        db,
        "SELECT jsonb_array_length(output->'sections') FROM pipeline_step_result"
        " WHERE step = 'extract_sections'",
    )
    in_flight = Settings().step_call_concurrency
    assert calls(db, run_id, "extract_fields") <= sections + in_flight
    recovery_s = float(resumed_at) - killed_at
    assert recovery_s <= 15, f"step 2 ran again {recovery_s:.1f}s after the kill"


def test_a_killed_pool_process_hands_its_step_on_at_once_without_the_reaper(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
) -> None:
    """An OOM kill takes one pool process, not the worker: its parent puts the message back
    (task_reject_on_worker_lost) and the step's lease, tied to the dead process' session, is
    taken over by the next claim. No beat runs here, so no reaper helps, and the lease (3 s)
    has not expired when the step runs again."""
    fake_llm.control("POST", "/control/config", json={"latency_ms": [250, 250]})
    worker = start_worker(concurrency=1)
    run_id = submit(db, publisher)
    wait_until(lambda: calls(db, run_id, "extract_fields", "ok") >= 2, timeout_s=30)
    owner = str(step_field(db, "extract_fields", "lease_owner"))
    child = int(owner.split(":")[1])  # worker_identity(): host:pid:nonce
    assert child != worker.pid, "the step runs in a pool process"
    killed = scalar(
        db, "SELECT lease_expires_at FROM pipeline_step_result WHERE step = 'extract_fields'"
    )
    os.kill(child, signal.SIGKILL)

    wait_until(lambda: int(str(step_field(db, "extract_fields", "attempt"))) >= 2, timeout_s=30)
    started = step_field(db, "extract_fields", "started_at")
    assert isinstance(started, datetime) and isinstance(killed, datetime)
    assert started < killed, "claimed again before the dead process' lease would expire"
    assert wait_for_end(db, run_id) == "done"
    assert calls(db, run_id, "extract_sections") == 1, "step 1 must not run again"
    assert "WorkerLostError" in worker.log_text() or "SIGKILL" in worker.log_text()


def test_sigterm_mid_step_finishes_the_step_and_loses_nothing(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    fake_llm.control("POST", "/control/config", json={"latency_ms": [200, 200]})
    worker = start_worker(concurrency=1)
    run_id = submit(db, publisher)
    wait_until(lambda: calls(db, run_id, "extract_fields", "ok") >= 1, timeout_s=30)

    worker.signal(signal.SIGTERM)  # warm shutdown: the running step completes
    assert worker.proc is not None
    assert worker.proc.wait(timeout=40) == 0
    assert (
        scalar(db, "SELECT status FROM pipeline_step_result WHERE step = 'extract_fields'")
        == "done"
    )

    start_worker(concurrency=1)
    assert wait_for_end(db, run_id, timeout_s=30) == "done"
    assert scalar(db, "SELECT max(attempt) FROM pipeline_step_result") == 1, "nothing ran twice"
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE status <> 'ok'") == 0


def test_429_on_step_2_is_retried_with_backoff_then_done(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    fake_llm.control(
        "POST",
        "/control/faults",
        json={"kind": "429", "count": 2, "step": "extract_fields", "retry_after": 0.5},
    )
    # One call at a time, so that each 429 fails a whole attempt of the step.
    start_worker(DOCPIPE_STEP_CALL_CONCURRENCY="1")
    run_id = submit(db, publisher)
    assert wait_for_end(db, run_id) == "done"
    assert scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = 'extract_fields'") == 3
    with db.session() as s:
        rows = s.conn.execute(
            b"SELECT step_attempt, error_kind, extract(epoch FROM created_at) AS sent,"
            b" extract(epoch FROM finished_at) AS finished FROM llm_call_log"
            b" WHERE step = 'extract_fields' ORDER BY id"
        ).fetchall()
    limited = [r for r in rows if r["error_kind"] == "rate_limited"]
    assert [r["step_attempt"] for r in limited] == [1, 2]
    # Each retry waited at least the provider's Retry-After, plus full jitter whose window
    # (base 0.2 s * 2^(attempt-1)) grows with the attempt.
    for failed in limited:
        retry = next(r for r in rows if r["step_attempt"] == failed["step_attempt"] + 1)
        gap = float(retry["sent"]) - float(failed["finished"])
        window = 0.2 * 2 ** (failed["step_attempt"] - 1)
        assert 0.5 <= gap <= 0.5 + window + 1.0, f"attempt {failed['step_attempt']}: {gap:.2f}s"


def test_an_empty_document_fails_at_its_first_model_step_at_once(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
) -> None:
    start_worker()
    run_id = submit(db, publisher, text="")
    assert wait_for_end(db, run_id) == "failed"
    assert scalar(db, "SELECT count(*) FROM llm_call_log") == 0
    step = "SELECT {} FROM pipeline_step_result WHERE step = 'extract_sections'"
    assert scalar(db, step.format("status")) == "failed"
    assert scalar(db, step.format("attempt")) == 1, "no retries"
    assert "empty" in scalar(db, "SELECT error FROM pipeline_run")


def test_an_unpublished_step_is_swept_and_runs(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    """The API died between commit and publish: the outbox row alone gets the run done."""
    created = new_run(db, CONTRACT.text)  # committed, never published
    start_worker()
    start_beat()
    assert wait_for_end(db, created.run_id) == "done"


def test_a_flushed_broker_loses_no_run(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    import redis as redis_lib

    assert isinstance(broker, redis_lib.Redis)
    run_ids = [submit(db, publisher, key=f"k{i}") for i in range(5)]
    broker.flushall()  # every message is gone before any worker saw it
    start_worker()
    start_beat()
    assert {wait_for_end(db, r) for r in run_ids} == {"done"}


def test_two_beats_fire_each_periodic_job_once_per_interval(
    db: Database,
    broker: object,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    # Ten intervals of the reaper watched, at half of FAST_TIMINGS' interval (so half the
    # window). The guard's gap is a share of the interval, and what happened before the
    # window (the second beat's start) is left out, so the bounds keep their margins:
    # unguarded, two beats run the job about 20 times where 14.5 pass; one beat alone sends
    # 10 messages where 16 are asked for.
    interval = 0.5
    reaper = {"DOCPIPE_REAPER_INTERVAL_S": str(interval)}
    worker = start_worker(**reaper)
    start_beat(**reaper)
    start_beat(**reaper)

    def received_and_runs() -> tuple[int, int]:
        pattern = r"docpipe\.periodic\.recover_stalled_work\[.*\] received"
        received = len(re.findall(pattern, worker.log_text()))
        runs = scalar(
            db,
            "SELECT coalesce(max(runs), 0) FROM periodic_job WHERE name = 'recover_stalled_work'",
        )
        return received, int(runs)

    received_before, runs_before = received_and_runs()
    started = time.monotonic()
    time.sleep(10 * interval)  # the observation window: the rates below are its measure
    intervals = (time.monotonic() - started) / interval
    received, runs = received_and_runs()
    assert received - received_before >= 1.6 * intervals, "both beats must be firing"
    assert runs - runs_before <= 1.25 * intervals + 2


def test_an_idle_worker_stops_cleanly_on_sigterm(start_worker: StartWorker, broker: object) -> None:
    worker = start_worker()
    worker.signal(signal.SIGTERM)
    assert worker.proc is not None
    assert worker.proc.wait(timeout=30) == 0


def test_task_events_are_off_until_a_monitor_turns_them_on(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
) -> None:
    start_worker()
    seen: list[str] = []
    with celery_app.connection_for_read() as conn:
        receiver = celery_app.events.Receiver(
            conn, handlers={"*": lambda event: seen.append(event["type"])}
        )
        listening = threading.Thread(target=receiver.capture, kwargs={"limit": None}, daemon=True)
        listening.start()
        try:
            # The worker's heartbeats show that events reach this receiver at all.
            wait_until(lambda: "worker-heartbeat" in seen, timeout_s=10)
            assert wait_for_end(db, submit(db, publisher, key="quiet")) == "done"
            assert not [kind for kind in seen if kind.startswith("task-")]
            celery_app.control.enable_events()  # what Flower does when it starts
            assert wait_for_end(db, submit(db, publisher, key="watched")) == "done"
            wait_until(lambda: "task-succeeded" in seen, timeout_s=10)
            assert "task-received" in seen and "task-started" in seen
        finally:
            receiver.should_stop = True
            listening.join(timeout=5)
