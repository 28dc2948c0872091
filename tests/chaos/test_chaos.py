"""Crashes, restarts and outages while work runs; afterwards, nothing lost and nothing paid
twice (see invariants.py). Bounded in time: each scenario ends within a few minutes."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import httpx
import pytest

from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess, api_argv, beat_argv
from tests.chaos.invariants import CONTRACTS, ChaosStack, check_invariants
from tests.receivers import RawReceiver

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    """The pool processes of a celery worker (its direct children)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def assert_clean(chaos: ChaosStack, name: str) -> None:
    result = check_invariants(chaos, name)
    assert result.problems == []
    assert result.done == result.runs > 0


def test_random_sigkills_of_workers_during_a_200_document_batch(chaos: ChaosStack) -> None:
    # Webhooks go to a receiver that accepts connections and never answers, all along.
    hanging = RawReceiver("hang").start()
    chaos.client.rotate_webhook_secret()
    chaos.submit_batch(200, callback_url=hanging.url)
    for i in range(10):  # interactive work is hit too
        chaos.client.put_document(f"solo-{i}", CONTRACTS[i].text)
        chaos.client.extract(f"solo-{i}", callback_url=hanging.url)
    rng = random.Random(7)
    chaos.wait_until(lambda: chaos.steps_done() >= 20)
    while chaos.faults < 24:
        name = rng.choice(["worker-batch", "worker-interactive"])
        worker = next(p for p in chaos.stack.processes if p.name == name)
        assert worker.alive(), f"{name} died on its own:\n{worker.log_text()[-3000:]}"
        # A pool child killed before the worker is ready takes the worker down with it
        # (Celery: "Could not start worker processes"); an OOM kill hits running pools.
        worker.wait_for_log(r"\bready\.", timeout_s=60)
        pool = children(worker.pid)
        if rng.random() < 0.5 and pool:
            os.kill(rng.choice(pool), signal.SIGKILL)  # one pool child (an OOM kill)
        else:
            chaos.stack.replace(name, kill=True)  # the whole worker (a node loss)
        chaos.faults += 1
        time.sleep(rng.uniform(0.5, 2.0))
    chaos.wait_for_all_runs(timeout_s=300)
    assert_clean(chaos, "20+ SIGKILLs of workers (parents and children), a hanging receiver")
    try:
        assert_webhooks_cut_off_and_retried(chaos, hanging, deliveries=11)
    finally:
        hanging.stop()


def assert_webhooks_cut_off_and_retried(
    chaos: ChaosStack, receiver: RawReceiver, deliveries: int
) -> None:
    """Every delivery to a receiver that never answers ends 'failed' with each of its
    attempts recorded (killed ones included); no connection outlived the deadline by much."""
    attempts = int(os.environ["DOCPIPE_WEBHOOK_MAX_ATTEMPTS"])
    chaos.wait_until(
        lambda: (
            chaos.scalar("SELECT count(*) FROM webhook_delivery WHERE status = 'failed'")
            == deliveries
        ),
        timeout_s=180,
    )
    rows = chaos.sql("SELECT attempts, last_error FROM webhook_delivery")
    assert len(rows) == deliveries
    assert {(r["attempts"], r["last_error"]) for r in rows} <= {
        (attempts, "timeout"), (attempts, "interrupted"),
    }  # fmt: skip
    assert len(receiver.connections) >= deliveries * (attempts - 1), "retried"
    deadline_s = float(os.environ["DOCPIPE_WEBHOOK_TIMEOUT_S"])
    chaos.wait_until(lambda: len(receiver.closed()) == len(receiver.connections), timeout_s=30)
    longest = max(c.closed_at - c.opened_at for c in receiver.closed() if c.closed_at)
    # The receiver never answers: only docpipe's deadline (or a killed worker) ends a
    # connection; five deadlines leave room for a machine this loaded.
    assert longest < 5 * deadline_s, f"a connection stayed open {longest:.1f}s"


def test_redis_killed_and_restarted_empty_mid_batch(chaos: ChaosStack) -> None:
    chaos.submit_batch(60)
    chaos.wait_until(lambda: chaos.steps_done() >= 30)
    chaos.broker.kill()
    time.sleep(3)
    chaos.broker.start()  # no persistence: every queued and unacked message is gone
    chaos.faults += 1
    chaos.wait_for_all_runs()
    assert_clean(chaos, "Redis killed, restarted empty")


def test_postgresql_restarted_mid_batch(chaos: ChaosStack) -> None:
    chaos.submit_batch(60)
    chaos.wait_until(lambda: chaos.steps_done() >= 30)
    postgres = chaos.stack.postgres
    assert postgres is not None
    postgres.kill()  # a crash, not a clean shutdown
    time.sleep(3)
    postgres.start()
    chaos.faults += 1
    chaos.wait_for_all_runs()
    assert_clean(chaos, "PostgreSQL crashed, restarted")


def test_the_provider_down_for_30_s_delays_runs_without_failing_them(chaos: ChaosStack) -> None:
    chaos.submit_batch(40)
    chaos.wait_until(lambda: chaos.steps_done() >= 20)
    fake = chaos.stack.halt("fake-llm", kill=True)
    time.sleep(30)
    chaos.stack.resume(fake)
    chaos.faults += 1
    chaos.wait_for_all_runs()
    assert_clean(chaos, "provider down for 30 s")


def test_two_beats_then_beat_killed_and_restarted(chaos: ChaosStack) -> None:
    chaos.submit_batch(40)
    stack = chaos.stack
    beat = stack.process("beat")
    second = ManagedProcess("beat-2", beat_argv(), beat.log_path.with_name("beat-2.log"),
                            env=beat.env).start()  # fmt: skip
    try:
        runs_before = chaos.scalar("SELECT runs FROM periodic_job WHERE name = 'sweep_outbox'")
        started = time.monotonic()
        time.sleep(10)
        runs_after = chaos.scalar("SELECT runs FROM periodic_job WHERE name = 'sweep_outbox'")
        interval = float(os.environ["DOCPIPE_OUTBOX_SWEEP_INTERVAL_S"])
        fired = runs_after - (runs_before or 0)
        assert fired <= 1.25 * (time.monotonic() - started) / interval + 2, "double firing"
    finally:
        second.stop()
    stack.replace("beat", kill=True)
    chaos.faults += 2
    chaos.wait_for_all_runs()
    assert_clean(chaos, "two beats, then beat killed")


def test_the_api_killed_between_commit_and_publish(chaos: ChaosStack) -> None:
    env = {**chaos.stack.process("api").env, "DOCPIPE_CRASH_AT": "api.after_commit"}
    headers = {"Authorization": f"Bearer {chaos.stack.api_key}"}
    for i in range(10):
        port = free_port()
        api = ManagedProcess("api-crashing", api_argv(host="127.0.0.1", port=port),
                             chaos.stack.process("api").log_path.with_name("api-crash.log"),
                             env=env).start()  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        chaos.client.put_document(f"crash-{i}", CONTRACTS[i].text)
        with pytest.raises(httpx.TransportError):
            httpx.post(f"{url}/documents/crash-{i}/extract", headers=headers)
        assert api.proc is not None
        assert api.proc.wait(10) == 137
        api.stop()
        chaos.faults += 1
    assert chaos.scalar("SELECT count(*) FROM pipeline_run") == 10, "each commit happened"
    chaos.wait_for_all_runs()
    assert_clean(chaos, "API killed between commit and publish")


def test_a_sigterm_rolling_restart_of_every_worker_during_a_batch(chaos: ChaosStack) -> None:
    chaos.submit_batch(60)
    chaos.wait_until(lambda: chaos.steps_done() >= 20)
    for name in ("worker-batch", "worker-interactive", "worker-batch"):
        chaos.stack.replace(name, kill=False)  # SIGTERM, warm shutdown, start again
        chaos.faults += 1
        time.sleep(2)
    chaos.wait_for_all_runs()
    assert_clean(chaos, "SIGTERM rolling restart of workers")
