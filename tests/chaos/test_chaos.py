"""Crashes, restarts, partitions and outages while work runs; afterwards, nothing lost and
nothing paid twice or without a record (see invariants.py). Bounded in time: each scenario
ends within a few minutes, and has its own pytest timeout above its waits."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from pathlib import Path

import httpx
import pytest
import redis

from docpipe_dev.hostile.corpus import CORPUS
from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess, api_argv, beat_argv
from tests.chaos.invariants import CONTRACTS, ChaosStack, check_invariants
from tests.support.receivers import RawReceiver

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    """The pool processes of a celery worker (its direct children)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def assert_clean(chaos: ChaosStack, name: str) -> None:
    result = check_invariants(chaos, name)
    assert result.problems == []
    assert result.done == result.runs > 0


# The SIGKILL scenario's waits, and its own timeout above their sum (the suite's default of
# 300 s is shorter than its drain alone); the webhooks' end is waited for after the drain.
_KILLS, _WARMUP_S, _READY_S, _PAUSE_MAX_S, _DRAIN_S, _WEBHOOKS_S = 24, 240, 60, 2, 300, 210


@pytest.mark.timeout(_WARMUP_S + _KILLS * (_READY_S + _PAUSE_MAX_S) + _DRAIN_S + _WEBHOOKS_S + 120)
def test_random_sigkills_of_workers_during_a_200_document_batch(chaos: ChaosStack) -> None:
    # Webhooks go to a receiver that accepts connections and never answers, all along.
    hanging = RawReceiver("hang").start()
    chaos.client.rotate_webhook_secret()
    chaos.submit_batch(200, callback_url=hanging.url)
    for i in range(10):  # interactive work is hit too
        chaos.client.put_document(f"solo-{i}", CONTRACTS[i].text)
        chaos.client.extract(f"solo-{i}", callback_url=hanging.url)
    rng = random.Random(7)
    chaos.wait_until(lambda: chaos.steps_done() >= 20, timeout_s=_WARMUP_S)
    while chaos.faults < _KILLS:
        name = rng.choice(["worker-batch", "worker-interactive"])
        worker = next(p for p in chaos.stack.processes if p.name == name)
        assert worker.alive(), f"{name} died on its own:\n{worker.log_text()[-3000:]}"
        # A pool child killed before the worker is ready takes the worker down with it
        # (Celery: "Could not start worker processes"); an OOM kill hits running pools.
        worker.wait_for_log(r"\bready\.", timeout_s=_READY_S)
        pool = children(worker.pid)
        if rng.random() < 0.5 and pool:
            os.kill(rng.choice(pool), signal.SIGKILL)  # one pool child (an OOM kill)
        else:
            chaos.stack.replace(name, kill=True)  # the whole worker (a node loss)
        chaos.faults += 1
        time.sleep(rng.uniform(0.5, _PAUSE_MAX_S))
    chaos.wait_for_all_runs(timeout_s=_DRAIN_S)
    assert_clean(chaos, "20+ SIGKILLs of workers (parents and children), a hanging receiver")
    try:
        assert_webhooks_cut_off_and_retried(chaos, hanging, deliveries=11)
    finally:
        hanging.stop()


# The threads scenario: fewer kills (each takes a whole worker and all its steps).
_THREADS_KILLS = 10


@pytest.mark.threads_pools
@pytest.mark.timeout(_WARMUP_S + _THREADS_KILLS * (_READY_S + _PAUSE_MAX_S) + _DRAIN_S + 120)
def test_random_sigkills_of_threads_workers_holding_many_steps_each(chaos: ChaosStack) -> None:
    """Both lanes on the threads pool, each process holding many steps in flight: whole
    workers SIGKILLed at random during a 200-document batch (a node loss; there is no pool
    child to lose). Every run ends done, nothing is paid twice, nothing is lost."""
    chaos.submit_batch(200)
    for i in range(10):
        chaos.client.put_document(f"solo-{i}", CONTRACTS[i].text)
        chaos.client.extract(f"solo-{i}")
    rng = random.Random(11)
    chaos.wait_until(lambda: chaos.steps_done() >= 20, timeout_s=_WARMUP_S)
    held: list[int] = []
    while chaos.faults < _THREADS_KILLS:
        name = rng.choice(["worker-batch", "worker-batch", "worker-interactive"])
        worker = next(p for p in chaos.stack.processes if p.name == name)
        assert worker.alive(), f"{name} died on its own:\n{worker.log_text()[-3000:]}"
        worker.wait_for_log(r"\bready\.", timeout_s=_READY_S)
        held.append(steps_held_by(chaos, worker.pid))
        chaos.stack.replace(name, kill=True)
        chaos.faults += 1
        time.sleep(rng.uniform(0.5, _PAUSE_MAX_S))
    chaos.wait_for_all_runs(timeout_s=_DRAIN_S)
    assert_clean(chaos, f"{_THREADS_KILLS} SIGKILLs of threads workers (steps held: {held})")
    assert max(held) > 1, f"no kill found more than one step in flight in a process: {held}"


@pytest.mark.threads_pools
def test_a_sigterm_rolling_restart_of_threads_workers_during_a_batch(chaos: ChaosStack) -> None:
    """SIGTERM drains a threads worker's steps in flight (or hands them back) before it
    exits; the restarted worker finishes the batch."""
    chaos.submit_batch(60)
    chaos.wait_until(lambda: chaos.steps_done() >= 20)
    for name in ("worker-batch", "worker-interactive", "worker-batch"):
        chaos.stack.replace(name, kill=False)
        chaos.faults += 1
        time.sleep(2)
    chaos.wait_for_all_runs()
    assert_clean(chaos, "SIGTERM rolling restart of threads workers")


def steps_held_by(chaos: ChaosStack, pid: int) -> int:
    """Steps running under a lease of the worker process ``pid`` (owner host:pid:nonce)."""
    return int(
        chaos.scalar(
            "SELECT count(*) FROM pipeline_step_result WHERE status = 'running'"
            " AND split_part(lease_owner, ':', 2) = %s",
            str(pid),
        )
    )


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
        (attempts, "timeout"),
        (attempts, "interrupted"),
    }
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
    second = ManagedProcess(
        "beat-2", beat_argv(), beat.log_path.with_name("beat-2.log"), env=beat.env
    ).start()
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
        api = ManagedProcess(
            "api-crashing",
            api_argv(host="127.0.0.1", port=port),
            chaos.stack.process("api").log_path.with_name("api-crash.log"),
            env=env,
        ).start()
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


# The new scenarios wait for warm-up and drain (up to 240 s each) around their fault.
_SCENARIO_TIMEOUT_S = 240 + 60 + 240 + 60


def worker_logs(chaos: ChaosStack) -> str:
    return "".join(p.log_text() for p in chaos.stack.processes if p.name.startswith("worker-"))


@pytest.mark.provider_in_namespace
@pytest.mark.timeout(_SCENARIO_TIMEOUT_S)
def test_the_provider_partitioned_for_20_s_hangs_no_call_past_its_timeout(
    chaos: ChaosStack,
) -> None:
    chaos.submit_batch(40)
    chaos.wait_until(lambda: chaos.steps_done() >= 20)
    assert chaos.provider_ns is not None
    # Packets to and from the provider vanish: calls on the wire and new connections hang
    # (no reset, no refusal) until the client's timeout.
    chaos.provider_ns.drop()
    time.sleep(20)
    chaos.provider_ns.heal()
    chaos.faults += 1
    chaos.wait_for_all_runs()
    assert_clean(chaos, "provider partitioned for 20 s (packets dropped)")
    logs = worker_logs(chaos)
    assert "provider timed out" in logs, "the partition was felt"
    assert "TimeLimitExceeded" not in logs, "no step hung until Celery's time limit"


_SLOW_DOWN = """
CREATE FUNCTION chaos_slow_down() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(random() * 0.3);
    RETURN NULL;
END $$;
"""
_SLOW_NO_MORE = """
CREATE OR REPLACE FUNCTION chaos_slow_down() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END $$;
"""
_SLOW_TRIGGERS = (
    ("chaos_slow_calls", "INSERT OR UPDATE", "llm_call_log"),
    ("chaos_slow_steps", "UPDATE", "pipeline_step_result"),
    ("chaos_slow_outbox", "INSERT OR UPDATE", "outbox"),
)


@pytest.mark.timeout(_SCENARIO_TIMEOUT_S)
def test_postgresql_answering_slowly_for_30_s(chaos: ChaosStack) -> None:
    chaos.submit_batch(40)
    chaos.wait_until(lambda: chaos.steps_done() >= 20)
    done_before = chaos.steps_done()
    # Every write to the hot tables (calls, steps, outbox) sleeps up to 0.3 s inside its
    # statement, holding its row locks meanwhile, as on an overloaded or throttled disk.
    # A trigger's creation and its drop lock their table against writes: one table, in a
    # transaction of its own, at a time. Several in one transaction would take the tables'
    # locks in turn while a step's transaction holds one and waits on another (a deadlock CI
    # met). The slowness ends by replacing the function, which locks no table.
    chaos.execute(_SLOW_DOWN)
    for trigger, events, table in _SLOW_TRIGGERS:
        chaos.execute(
            f"CREATE TRIGGER {trigger} AFTER {events} ON {table}"
            " FOR EACH ROW EXECUTE FUNCTION chaos_slow_down()"
        )
    time.sleep(30)
    slowed = chaos.steps_done() - done_before
    chaos.execute(_SLOW_NO_MORE)
    for trigger, _, table in _SLOW_TRIGGERS:
        chaos.execute(f"DROP TRIGGER {trigger} ON {table}")
    chaos.execute("DROP FUNCTION chaos_slow_down()")
    chaos.faults += 1
    chaos.wait_for_all_runs()
    assert_clean(chaos, "PostgreSQL slow for 30 s (0-0.3 s per write)")
    assert slowed > 0, "work went on, slower"


@pytest.mark.timeout(_SCENARIO_TIMEOUT_S)
def test_redis_at_maxmemory_for_20_s_refuses_writes_and_loses_nothing(chaos: ChaosStack) -> None:
    chaos.submit_batch(40)
    chaos.wait_until(lambda: chaos.steps_done() >= 20)
    broker = redis.Redis.from_url(chaos.broker.url)
    # noeviction with the ceiling just above what Redis holds, then filled up: every write
    # (publishing a message, a limiter script, kombu's unacked bookkeeping) answers OOM.
    used = int(broker.info("memory")["used_memory"])
    broker.config_set("maxmemory", used + 4_000_000)
    ballast = 0
    with contextlib.suppress(redis.exceptions.OutOfMemoryError):
        while ballast < 10_000:
            broker.set(f"chaos:ballast:{ballast}", b"x" * 100_000)
            ballast += 1
    assert ballast < 10_000, "Redis never said OOM"
    # Held just under what it holds now: the few bytes a consumed message frees do not let
    # the next write through.
    broker.config_set("maxmemory", int(broker.info("memory")["used_memory"]) - 1_000_000)
    time.sleep(20)
    broker.delete(*(f"chaos:ballast:{i}" for i in range(ballast)))
    broker.config_set("maxmemory", 0)
    broker.close()
    chaos.faults += 1
    chaos.wait_for_all_runs()
    assert_clean(chaos, "Redis at maxmemory for 20 s (noeviction)")
    assert "command not allowed when used memory > 'maxmemory'" in worker_logs(chaos)


@pytest.mark.timeout(_SCENARIO_TIMEOUT_S)
def test_reviews_decided_while_workers_are_sigkilled(chaos: ChaosStack) -> None:
    # Made-up quotes for some section calls: those runs pause for a person after
    # extract_fields; a reviewer approves each as it appears, while workers are killed.
    provider = chaos.stack.env["DOCPIPE_LLM_BASE_URL"].removesuffix("/v1")
    fault = {"kind": "invented_quote", "count": 40, "step": "extract_fields"}
    httpx.post(f"{provider}/control/faults", json=fault, timeout=10).raise_for_status()
    chaos.submit_batch(40)
    rng = random.Random(11)
    decided: set[str] = set()

    def settled() -> bool:
        waiting = chaos.scalar(
            "SELECT count(*) FROM pipeline_run WHERE status IN "
            "('queued', 'running', 'needs_review')"
        )
        return waiting == 0

    deadline = time.monotonic() + 240
    while not settled() and time.monotonic() < deadline:
        for review in chaos.client.reviews(limit="200")["reviews"]:
            chaos.client.decide(
                review["run_id"], {"revision": review["revision"], "action": "approve"}
            )
            decided.add(review["run_id"])
            if chaos.faults < 6:  # a decision, then a kill: its next step meets the crash
                name = rng.choice(["worker-batch", "worker-interactive"])
                chaos.stack.process(name).wait_for_log(r"\bready\.", timeout_s=60)
                chaos.stack.replace(name, kill=True)
                chaos.faults += 1
        time.sleep(0.5)
    assert_clean(chaos, "reviews decided while workers are SIGKILLed")
    assert decided and chaos.faults > 0, "runs paused for review, and workers were killed"
    once = chaos.sql("SELECT run_id::text, count(*) AS n FROM review_decision GROUP BY run_id")
    assert {r["run_id"] for r in once} == decided and all(r["n"] == 1 for r in once)
    reviewed = chaos.scalar(
        "SELECT count(*) FROM pipeline_step_result WHERE step = "
        "'extract_fields' AND review_decision_id IS NOT NULL"
    )
    assert reviewed == len(decided)


# The hostile corpus's files a worker reads (the API refuses the others at upload:
# tests/integration/test_hostile_requests.py, tests/unit/test_extraction.py).
_READ_BY_WORKERS = [f for f in CORPUS if not f.at_upload]


@pytest.mark.timeout(_SCENARIO_TIMEOUT_S)
@pytest.mark.parametrize(
    "pool", ["prefork", pytest.param("threads", marks=pytest.mark.threads_pools)]
)
def test_hostile_documents_mixed_into_a_batch_fail_with_their_kind_and_no_worker_dies(
    chaos: ChaosStack, pool: str
) -> None:
    """Under prefork each pool process meets several hostile files; under threads every
    file of the batch is read at once in the one process of the batch lane."""
    headers = {"Authorization": f"Bearer {chaos.stack.api_key}"}
    with httpx.Client(base_url=chaos.stack.api_url, headers=headers, timeout=120) as api:
        for hostile in _READ_BY_WORKERS:
            stored = api.put(f"/documents/hostile-{hostile.name}", content=hostile.make())
            assert stored.status_code == 201, (hostile.name, stored.text)
    pools = {}
    for name in ("worker-batch", "worker-interactive"):
        chaos.stack.process(name).wait_for_log(r"\bready\.", timeout_s=60)
        # A threads worker's children are the readers of PDFs, which come and go.
        pools[name] = sorted(children(chaos.stack.process(name).pid)) if pool == "prefork" else []
    # One hostile document after every second good one: each pool process meets several.
    documents: list[dict[str, str]] = []
    good = iter(range(len(CONTRACTS)))
    for hostile in _READ_BY_WORKERS:
        for i in (next(good), next(good)):
            documents.append({"id": f"doc-{i}", "text": CONTRACTS[i].text})
        documents.append({"id": f"hostile-{hostile.name}"})
    batch_id = str(chaos.client.submit_batch(documents)["batch_id"])
    chaos.wait_for_all_runs()
    runs = {
        r["document_id"]: r
        for r in chaos.sql(
            "SELECT r.id::text, r.document_id, r.status, r.error, s.status AS read"
            " FROM pipeline_run r JOIN pipeline_step_result s"
            " ON s.run_id = r.id AND s.step = 'extract_text' WHERE r.batch_id = %s",
            batch_id,
        )
    }
    assert len(runs) == len(documents)
    hostile_runs = {f"hostile-{f.name}" for f in _READ_BY_WORKERS}
    result = check_invariants(
        chaos,
        f"hostile documents mixed into a batch ({pool})",
        judged_apart=[runs[d]["id"] for d in hostile_runs],
    )
    assert result.problems == []
    ended = {}
    for hostile in _READ_BY_WORKERS:
        run = runs[f"hostile-{hostile.name}"]
        if hostile.kind is None:  # read within its bounds: a document like any other
            ended[hostile.name] = run["read"]
        else:
            kind = (run["error"] or "").split(":", 1)[0]
            # A file that may meet the time bound before its own on a busy machine.
            ended[hostile.name] = (run["status"], hostile.kind if kind == hostile.or_kind else kind)
    assert ended == {
        f.name: "done" if f.kind is None else ("failed", f.kind) for f in _READ_BY_WORKERS
    }
    assert all(r["status"] == "done" for d, r in runs.items() if d not in hostile_runs)
    for name, before in pools.items():
        worker = chaos.stack.process(name)
        assert worker.alive(), f"{name} died:\n{worker.log_text()[-3000:]}"
        if pool == "prefork":
            assert sorted(children(worker.pid)) == before, f"a process of {name}'s pool died"
    logs = worker_logs(chaos)
    assert "WorkerLostError" not in logs
    assert "restarting this worker process" not in logs, "a threads worker past a limit"
