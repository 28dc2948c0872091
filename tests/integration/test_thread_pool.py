"""The threads pool (DOCPIPE_WORKER_POOL=threads) on real `celery worker` processes: many
steps in flight in one process on a small pool of connections, a killed process' steps run
again elsewhere without re-paying answered calls, SIGTERM drains, the soft time limit
interrupts a step between its calls, a thread stuck past its hard limit gives its step up
and the process restarts itself, and a process past its memory bound restarts without
losing its steps."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from docpipe.broker.transport import CeleryPublisher
from docpipe.pipelines.text_extraction import with_text_extraction
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.documents import put_document
from docpipe.state.outbox import publish_outbox
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import TENANT, new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until
from tests.support.stalling_pipelines import HOLD, MARKER_ENV, STALL, TWO_CALLS

StartWorker = Callable[..., ManagedProcess]
CONTRACTS = sample_contracts(3)
THREADS = {"DOCPIPE_WORKER_POOL": "threads"}
# Limits short enough for a test, in the production order: every client wait below the
# soft limit, the provider's timeout too, soft + provider timeout below the hard limit.
SHORT_LIMITS = {
    "DOCPIPE_LLM_TIMEOUT_S": "4.5",
    "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "5",
    "DOCPIPE_TASK_TIME_LIMIT_S": "10",
    "DOCPIPE_DATABASE_CONNECT_TIMEOUT_S": "2",
    "DOCPIPE_DATABASE_SOCKET_TIMEOUT_S": "4",
    "DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S": "4",
    "DOCPIPE_DATABASE_LOCK_TIMEOUT_S": "2",
    "DOCPIPE_DATABASE_POOL_TIMEOUT_S": "4",
    "DOCPIPE_REDIS_SOCKET_TIMEOUT_S": "2",
    "DOCPIPE_LIMITER_MAX_WAIT_S": "2",
    "DOCPIPE_WEBHOOK_TIMEOUT_S": "2",
}

# The stuck thread's test waits out a hard limit and then the provider's timeout past it
# (the process restarts then): both as short as the same order allows, every client wait
# still below the soft limit.
STUCK_SOON = {
    **SHORT_LIMITS,
    "DOCPIPE_LLM_TIMEOUT_S": "2",
    "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "3",
    "DOCPIPE_TASK_TIME_LIMIT_S": "5.5",
    "DOCPIPE_DATABASE_SOCKET_TIMEOUT_S": "2.5",
    "DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S": "2.5",
    "DOCPIPE_DATABASE_POOL_TIMEOUT_S": "2.5",
}


def submit_contracts(
    db: Database, publisher: CeleryPublisher, count: int, first: int = 0
) -> list[str]:
    ids, outbox = [], ()
    for i in range(first, first + count):
        created = new_run(db, CONTRACTS[i % len(CONTRACTS)].text, key=f"k{i}", document_id=f"d{i}")
        ids.append(created.run_id)
        outbox += created.outbox_ids
    publish_outbox(db, publisher, outbox)
    return ids


def submit_runs_of(
    db: Database, publisher: CeleryPublisher, pipeline: Any, count: int
) -> list[str]:
    loaded = with_text_extraction(pipeline)  # as the worker's catalog loads it
    ids: list[str] = []
    outbox: tuple[int, ...] = ()
    with db.transaction() as tx:
        put_document(tx, TENANT, "memo", "The server room flooded on Monday.")
        for i in range(count):
            created = runs.create_run(
                tx,
                tenant_id=TENANT,
                document_id="memo",
                pipeline=loaded,
                lane="interactive",
                idempotency_key=f"{pipeline.name}-{i}",
                request={"n": i},
            )
            ids.append(created.run_id)
            outbox += created.outbox_ids
    publish_outbox(db, publisher, outbox)
    return ids


def statuses(db: Database, run_ids: Iterable[str]) -> list[str]:
    return [str(scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", r)) for r in run_ids]


def all_ended(db: Database, run_ids: list[str], timeout_s: float = 120) -> list[str]:
    def ended() -> list[str] | None:
        found = statuses(db, run_ids)
        return None if {"queued", "running"} & set(found) else found

    result: list[str] = wait_until(ended, timeout_s, every_s=0.25)
    return result


def attempts(db: Database, step: str) -> int:
    return int(scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = %s", step))


def running_steps(db: Database) -> int:
    return int(scalar(db, "SELECT count(*) FROM pipeline_step_result WHERE status = 'running'"))


def answered_calls(db: Database) -> int:
    return int(scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'ok'"))


def answered_twice(db: Database) -> int:
    """Calls answered more than once (the same call key of the same run, step, generation)."""
    return int(
        scalar(
            db,
            "SELECT count(*) FROM (SELECT 1 FROM llm_call_log WHERE status = 'ok'"
            " GROUP BY run_id, step, generation, call_key HAVING count(*) > 1) twice",
        )
    )


def connections(db: Database, application: str) -> int:
    return int(
        scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", application)
    )


def test_one_process_holds_many_steps_on_a_small_shared_pool_of_connections(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
) -> None:
    """40 slots, 2 pooled connections: the steps wait on the provider together (no step
    holds a connection while it waits), and the process never opens more than its pool and
    its lease session."""
    fake_llm.control("POST", "/control/config", json={"latency_ms": [1000, 1000]})
    worker = start_worker(
        concurrency=40,
        DOCPIPE_DATABASE_POOL_SIZE="2",
        DOCPIPE_PROVIDER_MAX_CONCURRENCY="400",
        PGAPPNAME="threads-worker",
        **THREADS,
    )
    run_ids = submit_contracts(db, publisher, 40)
    most = 0

    def sampled_until_done() -> bool:
        nonlocal most
        most = max(most, connections(db, "threads-worker"))
        return "running" not in statuses(db, run_ids) and "queued" not in statuses(db, run_ids)

    wait_until(sampled_until_done, timeout_s=120, every_s=0.2)
    assert set(statuses(db, run_ids)) == {"done"}
    assert fake_llm.stats()["max_in_flight"] >= 30, "the steps' calls waited together"
    assert 1 <= most <= 2, f"{most} pooled connections at once"
    assert connections(db, "docpipe-lease-session") <= 1
    assert answered_twice(db) == 0
    assert "HTTP Request" not in worker.log_text(), "a log line per provider call"


def test_a_killed_process_takes_its_leases_and_its_steps_run_again_elsewhere(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    fake_llm.control("POST", "/control/config", json={"latency_ms": [600, 600]})
    start_beat()
    doomed = start_worker(concurrency=20, **THREADS)
    run_ids = submit_contracts(db, publisher, 20)
    wait_until(lambda: answered_calls(db) >= 30 and running_steps(db) >= 10, timeout_s=60)
    doomed.kill_group()
    # The kill is the test: the steps it interrupted and those after it go at full speed.
    fake_llm.control("POST", "/control/config", json={"latency_ms": [0, 0]})
    start_worker(concurrency=20, **THREADS)
    assert set(all_ended(db, run_ids)) == {"done"}
    assert answered_twice(db) == 0, "a call answered before the kill was paid again"
    assert int(scalar(db, "SELECT max(attempt) FROM pipeline_step_result")) >= 2


def test_sigterm_drains_every_step_in_flight(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
) -> None:
    fake_llm.control("POST", "/control/config", json={"latency_ms": [400, 400]})
    worker = start_worker(concurrency=20, **THREADS)
    run_ids = submit_contracts(db, publisher, 20)
    wait_until(lambda: running_steps(db) >= 15, timeout_s=60)
    worker.signal(signal.SIGTERM)
    assert worker.proc is not None
    assert worker.proc.wait(timeout=60) == 0
    assert running_steps(db) == 0, "a step was left running"
    start_worker(concurrency=20, **THREADS)
    assert set(all_ended(db, run_ids)) == {"done"}
    assert answered_twice(db) == 0
    assert int(scalar(db, "SELECT count(*) FROM llm_call_log WHERE status <> 'ok'")) == 0


def test_the_soft_limit_interrupts_a_step_between_its_calls_and_nothing_is_paid_twice(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
) -> None:
    """Two calls of 3 s each, a soft limit of 5 s: the interruption comes during the second
    call, waits for its answer to be on record, and hands the step back; its next attempt
    finds both answers memoised."""
    fake_llm.control("POST", "/control/config", json={"latency_ms": [3000, 3000]})
    worker = start_worker(
        concurrency=4,
        DOCPIPE_PIPELINE_MODULES="tests.support.stalling_pipelines",
        **THREADS,
        **SHORT_LIMITS,
    )
    [run_id] = submit_runs_of(db, publisher, TWO_CALLS, 1)
    assert all_ended(db, [run_id], timeout_s=120) == ["done"]
    assert attempts(db, "ask_twice") == 2
    assert fake_llm.stats()["requests_total"] == 2, "an answered call was paid again"
    assert "Soft time limit (5.0s) exceeded" in worker.log_text()


def test_a_thread_stuck_past_its_hard_limit_gives_its_step_up_and_the_process_restarts(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
    tmp_path: Path,
) -> None:
    """The step blocks where no interruption reaches it; at the hard limit its lease is given
    up (the reaper hands it on) while other steps of the same process go on; the stuck
    thread makes the process execute itself again (same pid), and the step's next attempt
    ends the run."""
    fake_llm.control("POST", "/control/config", json={"latency_ms": [500, 500]})
    marker = tmp_path / "stalled"
    start_beat()
    worker = start_worker(
        concurrency=8,
        DOCPIPE_PIPELINE_MODULES="tests.support.stalling_pipelines",
        **{MARKER_ENV: str(marker)},
        **THREADS,
        **STUCK_SOON,
    )
    [stalled] = submit_runs_of(db, publisher, STALL, 1)
    wait_until(marker.exists, timeout_s=30)
    others = submit_contracts(db, publisher, 3)
    assert all_ended(db, [stalled], timeout_s=120) == ["done"]
    assert set(all_ended(db, others, timeout_s=120)) == {"done"}
    log = worker.log_text()
    assert "Hard time limit (5.5s) exceeded" in log
    assert "given up at its hard time limit" in log
    assert "restarting this worker process: a task's thread is stuck" in log
    assert worker.alive(), "the process executed itself again: same pid"
    assert attempts(db, "stall_once") == 2
    assert answered_twice(db) == 0


def test_a_process_past_its_memory_bound_restarts_without_losing_its_steps(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
) -> None:
    """Every worker process is past a 32 MiB bound: after each task it restarts itself, its
    steps in flight finished or handed back first; every run still ends, nothing twice."""
    fake_llm.control("POST", "/control/config", json={"latency_ms": [200, 200]})
    worker = start_worker(concurrency=6, DOCPIPE_WORKER_MAX_MEMORY_PER_CHILD_MB="32", **THREADS)
    run_ids = submit_contracts(db, publisher, 6)
    # The process started again takes the next runs and is past the bound too. (They come
    # once it is up: a draining process may still take the first runs' next steps, so how
    # many restarts those alone cause depends on the machine's load.)
    wait_until(lambda: len(re.findall(r"\bready\.", worker.log_text())) >= 2, timeout_s=120)
    run_ids += submit_contracts(db, publisher, 6, first=6)
    assert set(all_ended(db, run_ids, timeout_s=180)) == {"done"}
    restarts = "restarting this worker process: resident memory"
    wait_until(lambda: worker.log_text().count(restarts) >= 2, timeout_s=30)
    assert answered_twice(db) == 0
    assert worker.alive()


def test_a_sigterm_while_a_restart_drains_stops_the_process_instead_of_restarting_it(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    tmp_path: Path,
) -> None:
    """A process past its memory bound restarts after a step ends; a step held in flight
    keeps that restart draining while the SIGTERM comes. Once the step is let go the process
    exits (code 0, not started again), where it used to execute itself again, the signal
    lost, until the supervisor's kill."""
    marker = tmp_path / "held"
    worker = start_worker(
        concurrency=2,
        DOCPIPE_WORKER_MAX_MEMORY_PER_CHILD_MB="32",
        DOCPIPE_PIPELINE_MODULES="tests.support.stalling_pipelines",
        **{MARKER_ENV: str(marker)},
        **THREADS,
    )
    [held] = submit_runs_of(db, publisher, HOLD, 1)
    wait_until(marker.exists, timeout_s=30)
    # Another run's first step ends while the held one runs: this process is restarting (the
    # held run's own first step may have started it already).
    submit_contracts(db, publisher, 1)

    def restarting() -> bool:
        log = worker.log_text()
        return log.count("restarting this worker process") == len(re.findall(r"\bready\.", log))

    wait_until(restarting, timeout_s=30)
    starts = len(re.findall(r"\bready\.", worker.log_text()))
    worker.signal(signal.SIGTERM)
    marker.unlink()
    assert worker.proc is not None
    assert worker.proc.wait(timeout=15) == 0
    assert len(re.findall(r"\bready\.", worker.log_text())) == starts, "started again"
    assert statuses(db, [held]) == ["done"], "the held step was drained, not handed back"


def test_hung_provider_calls_end_at_their_deadline_and_give_their_slots_back(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
) -> None:
    """The provider takes the next four requests and never answers them, on a worker of two
    slots: each hung call ends at DOCPIPE_LLM_TIMEOUT_S (the provider sees its client leave),
    is recorded as a timeout, and its slot goes on to other work; every run ends done, each
    answer paid once, and no step reached its hard limit."""
    fake_llm.control("POST", "/control/config", json={"latency_ms": [100, 100]})
    for _ in range(4):
        fake_llm.add_fault("hang", hang_s=600)
    worker = start_worker(
        concurrency=2,
        DOCPIPE_PIPELINE_MODULES="tests.support.stalling_pipelines",
        **THREADS,
        **SHORT_LIMITS,
    )
    run_ids = submit_runs_of(db, publisher, TWO_CALLS, 4)
    assert set(all_ended(db, run_ids, timeout_s=180)) == {"done"}
    assert fake_llm.pending_faults() == []
    wait_until(lambda: fake_llm.stats()["by_status"].get("499") == 4, timeout_s=30)
    with db.session() as s:
        failed = s.conn.execute(
            b"SELECT status, error_kind FROM llm_call_log WHERE status <> 'ok'"
        ).fetchall()
    kinds = [(r["status"], r["error_kind"]) for r in failed]
    assert kinds.count(("error", "timeout")) == 4, kinds
    # After the timeouts the limiter lowers the provider's concurrency: a call that waited
    # past DOCPIPE_LIMITER_MAX_WAIT_S for its turn was never sent.
    assert set(kinds) <= {("error", "timeout"), ("error", "throttled")}, kinds
    assert fake_llm.stats()["requests_total"] == 8 + 4
    assert answered_calls(db) == 8
    assert answered_twice(db) == 0
    assert "given up at its hard time limit" not in worker.log_text()
    assert worker.alive()
