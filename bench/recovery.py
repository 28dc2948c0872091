"""Time from losing the worker that runs step 2 of a run until step 2 runs again.

Four ways to lose it, --rounds each, with production timings (lease 8 s renewed every 2 s,
reaper every 1 s, the broker's visibility timeout left at 3600 s):

- pool process: the pool process running the step is SIGKILLed (an OOM kill); its parent
  puts the message back and the next claim finds the dead process' lease session gone;
- worker, a replica up: the worker (parent and pool processes) is SIGKILLed while a second
  worker serves the queue, as when a pod is deleted with grace 0; the reaper finds the
  session gone and the other worker runs the step;
- only worker, restarted: the lane's only worker is SIGKILLed and started again at once,
  so Celery's start-up is part of the time;
- partitioned: a worker in a network namespace of its own has its packets dropped; its
  session looks alive (no FIN arrives), so its lease must expire and the reaper hand the
  step to another worker; once the partition heals, whatever it sends is refused.

- a threads process holding --in-flight steps: a worker of the threads pool holds that
  many steps at once (each waiting on a provider that answers in 15 s) when it is
  SIGKILLed; a second threads worker takes every one of them. Measured per step, from the
  kill to its next attempt's claim.

    python -m bench.recovery [--rounds 5] [--in-flight 200] [--in-flight-rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bench.harness import Bench, bench_stack, percentile, summary, wait_for, write_report
from docpipe.broker.queues import LANE_QUEUES
from docpipe.settings import Settings
from docpipe_dev.partition import NetworkNamespace, TcpForwarder
from docpipe_dev.processes import ManagedProcess, worker_argv
from docpipe_dev.samples import sample_contracts

STEP2 = "extract_fields"
INTERACTIVE_QUEUE = LANE_QUEUES["interactive"]


@dataclass(frozen=True)
class Lease:
    owner: str
    attempt: int
    expires_at: float

    @property
    def pid(self) -> int:
        return int(self.owner.split(":")[1])  # worker_identity(): host:pid:nonce


@dataclass(frozen=True)
class Round:
    seconds: float  # loss -> step 2 claimed again
    lost_in_flight: int  # calls sent and never answered
    after_expiry: bool  # claimed again only once the lost lease had expired


def step2_lease(bench: Bench, run_id: str) -> Lease | None:
    rows = bench.sql(
        "SELECT lease_owner, attempt, extract(epoch FROM lease_expires_at)::float AS expires"
        " FROM pipeline_step_result WHERE run_id = %s AND step = %s AND status = 'running'",
        run_id,
        STEP2,
    )
    return Lease(rows[0]["lease_owner"], rows[0]["attempt"], rows[0]["expires"]) if rows else None


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def run_until_step2(bench: Bench, name: str, ok_calls: int = 2) -> tuple[str, Lease]:
    """A new run, once step 2 has ``ok_calls`` answered calls; its run id and step 2's lease."""
    bench.client.put_document(name, sample_contracts(1)[0].text)
    run_id = bench.client.extract(name)["run_id"]
    wait_for(
        lambda: (
            bench.scalar(
                "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND step = %s AND status = 'ok'",
                run_id,
                STEP2,
            )
            >= ok_calls
        )
    )
    lease = step2_lease(bench, run_id)
    assert lease is not None, "step 2 is not running"
    return run_id, lease


def resumed(bench: Bench, run_id: str, lost: Lease, lost_at: float) -> Round:
    """Wait for step 2's next attempt and the run's end; what the round measured."""
    started = wait_for(
        lambda: bench.scalar(
            "SELECT extract(epoch FROM started_at)::float FROM pipeline_step_result"
            " WHERE run_id = %s AND step = %s AND attempt > %s",
            run_id,
            STEP2,
            lost.attempt,
        ),
        timeout_s=120,
        every_s=0.02,
    )
    wait_for(lambda: bench.client.run(run_id)["status"] == "done")
    step1 = bench.scalar(
        "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND step = 'extract_sections'", run_id
    )
    assert step1 == 1, "step 1 ran again"
    lost_calls = bench.scalar(
        "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND status = 'sent'", run_id
    )
    return Round(float(started) - lost_at, int(lost_calls), float(started) >= lost.expires_at)


class Workers:
    """The interactive lane's workers: the stack's own, and replicas started here."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.replicas: list[ManagedProcess] = []

    def add_replica(self) -> None:
        stack = self.bench.stack
        name = f"replica-{len(self.replicas)}"
        env = {
            **stack.env,
            "DOCPIPE_METRICS_PORT": "0",
            "DOCPIPE_LIVENESS_FILE": str(stack.options.state_dir / f"{name}.alive"),
        }
        log = stack.options.state_dir / "logs" / f"worker-{name}.log"
        argv = worker_argv("interactive", concurrency=1, name=name)
        replica = ManagedProcess(f"worker-{name}", argv, log, env=env).start()
        replica.wait_for_log(r"\bready\.", timeout_s=120)
        self.replicas.append(replica)

    def all(self) -> list[ManagedProcess]:
        return [self.bench.stack.process("worker-interactive"), *self.replicas]

    def kill_and_restart(self, worker: ManagedProcess) -> Callable[[], None]:
        """SIGKILL ``worker``'s process tree now; the returned function starts it again."""
        if worker in self.replicas:
            worker.kill_group()
            return lambda: self._restart_replica(worker)
        old = self.bench.stack.halt("worker-interactive", kill=True)
        return lambda: self.bench.stack.resume(old).wait_for_log(r"\bready\.", timeout_s=120)

    def _restart_replica(self, old: ManagedProcess) -> None:
        new = ManagedProcess(old.name, old.argv, old.log_path, env=old.env).start()
        new.wait_for_log(r"\bready\.", timeout_s=120)
        self.replicas[self.replicas.index(old)] = new

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop(timeout_s=60)


def kill_rounds(
    bench: Bench, case: str, rounds: int, lose: Callable[[Lease], Callable[[], None]]
) -> list[Round]:
    results = []
    for i in range(rounds):
        run_id, lease = run_until_step2(bench, f"{case.split()[0]}-{i}")
        lost_at = time.time()
        restart = lose(lease)
        results.append(resumed(bench, run_id, lease, lost_at))
        restart()
        print(
            f"{case}, round {i + 1}: step 2 running again {results[-1].seconds:.2f}s later, "
            f"{results[-1].lost_in_flight} call(s) lost in flight"
        )
    return results


def restarted(restart: Callable[[], None]) -> Callable[[], None]:
    """Start the killed worker again at once, as a container restart does."""
    restart()
    return lambda: None


def kill_pool_process(lease: Lease) -> Callable[[], None]:
    os.kill(lease.pid, signal.SIGKILL)
    return lambda: None  # its parent starts a new pool process by itself


# --- partitioned ---------------------------------------------------------------------------


@contextmanager
def cut_off_worker(bench: Bench, ns: NetworkNamespace, name: str) -> Iterator[ManagedProcess]:
    """An interactive worker inside ``ns``, reaching the stack's PostgreSQL, Redis and
    provider through forwarders on the host's end of the veth."""
    env = bench.stack.env
    names = ("DOCPIPE_DATABASE_URL", "DOCPIPE_REDIS_URL", "DOCPIPE_LLM_BASE_URL")
    ports = {var: urlsplit(env[var]).port or 0 for var in names}
    forwarders = {var: TcpForwarder(ns.host_address, port) for var, port in ports.items()}
    try:
        own = {
            var: env[var].replace(f"127.0.0.1:{ports[var]}", f"{ns.host_address}:{f.port}")
            for var, f in forwarders.items()
        }
        state = bench.stack.options.state_dir
        worker = ns.start(
            f"worker-{name}",
            worker_argv("interactive", concurrency=1, name=name),
            state / "logs" / f"worker-{name}.log",
            env={
                **env,
                **own,
                "DOCPIPE_METRICS_PORT": "0",
                "DOCPIPE_LIVENESS_FILE": str(state / f"{name}.alive"),
            },
        )
        worker.wait_for_log(r"\bready\.", timeout_s=120)
        yield worker
    finally:
        for forwarder in forwarders.values():
            forwarder.close()


def consume(bench: Bench, worker_name: str, *, on: bool) -> None:
    """Let the named worker take interactive messages, or stop it (Celery remote control)."""
    from docpipe.broker.transport import app  # its broker is the stack's, set in main()

    destination = [f"{worker_name}@{socket.gethostname()}"]
    control = app.control.add_consumer if on else app.control.cancel_consumer
    replies = control(INTERACTIVE_QUEUE, destination=destination, reply=True, timeout=10)
    assert replies, f"{destination[0]} did not answer"


def partition_rounds(bench: Bench, rounds: int) -> tuple[list[Round], int, int]:
    """Rounds with the run's step 2 on a worker whose packets are then dropped; returns
    them, how many of the partitioned workers had what they sent later refused, and how
    many calls they sent after their step was taken over (none may be)."""
    results, refused, late_calls = [], 0, 0
    for i in range(rounds):
        with NetworkNamespace() as ns, cut_off_worker(bench, ns, f"cut-off-{i}") as worker:
            consume(bench, "interactive", on=False)  # step 2 goes to the cut-off worker
            try:
                run_id, lease = run_until_step2(bench, f"partitioned-{i}", ok_calls=1)
                assert parent_of(lease.pid) == worker.pid
                ns.drop()
                lost_at = time.time()
                consume(bench, "interactive", on=True)
                wait_for(
                    lambda run_id=run_id, lease=lease: (
                        bench.scalar(
                            "SELECT attempt FROM pipeline_step_result WHERE run_id = %s AND step = %s",
                            run_id,
                            STEP2,
                        )
                        > lease.attempt
                    ),
                    timeout_s=120,
                    every_s=0.02,
                )
                ns.heal()
                pattern = rf"lease of {run_id}/{STEP2} lost|result of {run_id}/{STEP2} refused"
                try:
                    wait_for(lambda p=pattern: re.search(p, worker.log_text()), timeout_s=60)
                    refused += 1
                except TimeoutError:
                    pass
                results.append(resumed(bench, run_id, lease, lost_at))
                late_calls += int(
                    bench.scalar(
                        "SELECT count(*) FROM llm_call_log c JOIN pipeline_step_result s"
                        " ON s.run_id = c.run_id AND s.step = c.step WHERE c.run_id = %s"
                        " AND c.step = %s AND c.step_attempt = %s AND c.created_at > s.started_at",
                        run_id,
                        STEP2,
                        lease.attempt,
                    )
                )
            finally:
                consume(bench, "interactive", on=True)
        print(
            f"partitioned, round {i + 1}: step 2 running elsewhere {results[-1].seconds:.2f}s "
            f"later (lease expired first: {results[-1].after_expiry})"
        )
    return results, refused, late_calls


# --- a threads process holding many steps ----------------------------------------------------

# Provider answers slow enough that every step submitted is still in flight when the last
# one is claimed; time limits with room for a document's slowest step at that pace.
SLOW_CALL_MS = 15_000
SLOW_ENV = {
    "DOCPIPE_LLM_TIMEOUT_S": "30",
    "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "240",
    "DOCPIPE_TASK_TIME_LIMIT_S": "300",
    "DOCPIPE_PROVIDER_MAX_CONCURRENCY": "4000",
}


@dataclass(frozen=True)
class ManyRound:
    held: int  # steps in flight in the killed process
    seconds: list[float]  # per step: kill -> its next attempt claimed
    reaped_s: float  # kill -> the reaper's pass that handed the steps on (its transaction)
    published_s: float  # kill -> the publish of their messages began
    load: float  # the machine's 1-minute load average at the kill
    ended_before: int  # steps that ended in the killed process before the kill
    answered_twice: int


def threads_worker(bench: Bench, name: str, slots: int) -> ManagedProcess:
    stack = bench.stack
    env = {
        **stack.env,
        "DOCPIPE_WORKER_POOL": "threads",
        "DOCPIPE_METRICS_PORT": "0",
        "DOCPIPE_LIVENESS_FILE": str(stack.options.state_dir / f"{name}.alive"),
    }
    log = stack.options.state_dir / "logs" / f"worker-{name}.log"
    worker = ManagedProcess(
        f"worker-{name}", worker_argv("interactive", concurrency=slots, name=name), log, env=env
    ).start()
    worker.wait_for_log(r"\bready\.", timeout_s=180)
    return worker


def held_steps(bench: Bench, pid: int) -> list[dict[str, object]]:
    return bench.sql(
        "SELECT run_id, step, attempt FROM pipeline_step_result"
        " WHERE status = 'running' AND split_part(lease_owner, ':', 2) = %s",
        str(pid),
    )


def answered_twice(bench: Bench) -> int:
    return int(
        bench.scalar(
            "SELECT count(*) FROM (SELECT 1 FROM llm_call_log WHERE status = 'ok'"
            " GROUP BY run_id, step, generation, call_key HAVING count(*) > 1) twice"
        )
    )


def handed_on(bench: Bench, held: list[dict[str, object]], lost_at: float) -> tuple[float, float]:
    """From the kill: the latest reaper pass that wrote a held step's outbox row (its
    transaction's start), and the latest start of their publish."""
    row = bench.sql(
        "SELECT max(extract(epoch FROM o.created_at))::float AS reaped,"
        " max(extract(epoch FROM o.published_at))::float AS published"
        " FROM outbox o JOIN unnest(%s::uuid[], %s::text[]) h(run_id, step)"
        " ON o.run_id = h.run_id AND o.step = h.step WHERE o.created_at >= to_timestamp(%s)",
        [str(h["run_id"]) for h in held],
        [str(h["step"]) for h in held],
        lost_at,
    )[0]
    return float(row["reaped"]) - lost_at, float(row["published"] or lost_at) - lost_at


def many_round(bench: Bench, i: int, steps: int) -> ManyRound:
    """``steps`` runs held by one threads worker, which is SIGKILLed; a standby takes them."""
    standby = threads_worker(bench, f"standby-{i}", steps)
    consume(bench, f"standby-{i}", on=False)
    holder = threads_worker(bench, f"holder-{i}", steps)
    try:
        text = sample_contracts(1)[0].text
        run_ids = []
        for n in range(steps):
            bench.client.put_document(f"held-{i}-{n}", text)
            run_ids.append(bench.client.extract(f"held-{i}-{n}")["run_id"])
        wait_for(lambda: len(held_steps(bench, holder.pid)) >= steps, timeout_s=300, every_s=0.2)
        held = held_steps(bench, holder.pid)
        holder.kill_group()
        lost_at = time.time()
        load = os.getloadavg()[0]
        consume(bench, f"standby-{i}", on=True)

        def next_attempts() -> dict[tuple[str, str], float] | None:
            rows = bench.sql(
                "SELECT s.run_id::text AS run_id, s.step, s.status, s.attempt,"
                " extract(epoch FROM s.started_at)::float AS started"
                " FROM pipeline_step_result s WHERE s.run_id = ANY(%s::uuid[])",
                [str(h["run_id"]) for h in held],
            )
            found = {(r["run_id"], r["step"]): r for r in rows}
            again = {}
            for h in held:
                row = found[(str(h["run_id"]), str(h["step"]))]
                if int(row["attempt"]) <= int(str(h["attempt"])):
                    return None
                again[(str(h["run_id"]), str(h["step"]))] = float(row["started"])
            return again

        again = wait_for(next_attempts, timeout_s=120, every_s=0.05)
        reaped_s, published_s = handed_on(bench, held, lost_at)
        wait_for(
            lambda: (
                bench.scalar(
                    "SELECT count(*) FROM pipeline_run WHERE id = ANY(%s::uuid[])"
                    " AND status NOT IN ('done', 'failed', 'needs_review')",
                    run_ids,
                )
                == 0
            ),
            timeout_s=900,
            every_s=1,
        )
    finally:
        holder.kill_group()
        standby.stop(timeout_s=120)
    seconds = sorted(started - lost_at for started in again.values())
    result = ManyRound(len(held), seconds, reaped_s, published_s, load, 0, answered_twice(bench))
    print(
        f"threads process holding {result.held} steps, round {i + 1}: all running again "
        f"{max(seconds):.2f}s after the kill (median {statistics.median(seconds):.2f}s; "
        f"reaped {reaped_s:.2f}s, publish began {published_s:.2f}s, first claim "
        f"{min(seconds):.2f}s), {result.answered_twice} call(s) answered twice"
    )
    return result


def many_rounds(rounds: int, steps: int) -> list[ManyRound]:
    with bench_stack(
        env=SLOW_ENV, interactive_concurrency=1, latency_ms=f"{SLOW_CALL_MS}:{SLOW_CALL_MS}"
    ) as bench:
        from docpipe.broker.transport import app

        app.conf.broker_url = bench.stack.env["DOCPIPE_REDIS_URL"]
        bench.stack.halt("worker-interactive", kill=False)  # the two threads workers serve
        return [many_round(bench, i, steps) for i in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--in-flight", type=int, default=200)
    parser.add_argument("--in-flight-rounds", type=int, default=3)
    parser.add_argument(
        "--only-in-flight",
        action="store_true",
        help="only the threads process holding --in-flight steps (report recovery-in-flight)",
    )
    args = parser.parse_args()
    if args.only_in_flight:
        many = many_rounds(args.in_flight_rounds, args.in_flight)
        write_report(
            "recovery-in-flight",
            f"# Recovery: a threads process holding {args.in_flight} steps\n\n"
            f"`python -m bench.recovery --only-in-flight --in-flight {args.in_flight} "
            f"--in-flight-rounds {args.in_flight_rounds}` (the rest of `bench.recovery`: "
            f"[recovery](recovery.md)).\n{_many_section(many, args.in_flight)}",
            _many_figures(many),
        )
        return
    settings = Settings()
    cases: dict[str, list[Round]] = {}
    refused = late_calls = 0
    with bench_stack(interactive_concurrency=1, latency_ms="400:700") as bench:
        from docpipe.broker.transport import app

        app.conf.broker_url = bench.stack.env["DOCPIPE_REDIS_URL"]
        workers = Workers(bench)
        try:
            cases["pool process"] = kill_rounds(
                bench, "pool process", args.rounds, kill_pool_process
            )
            workers.add_replica()
            cases["worker, a replica up"] = kill_rounds(
                bench,
                "worker replica",
                args.rounds,
                lambda lease: workers.kill_and_restart(
                    next(w for w in workers.all() if w.pid == parent_of(lease.pid))
                ),
            )
            workers.stop()
            workers.replicas.clear()
            cases["only worker, restarted"] = kill_rounds(
                bench,
                "only worker",
                args.rounds,
                lambda lease: restarted(
                    workers.kill_and_restart(bench.stack.process("worker-interactive"))
                ),
            )
            if os.geteuid() == 0:
                cases["partitioned"], refused, late_calls = partition_rounds(bench, args.rounds)
            else:
                print("partitioned: skipped, network namespaces need root")
        finally:
            workers.stop()
    many = many_rounds(args.in_flight_rounds, args.in_flight) if args.in_flight_rounds else []
    medians = {case: statistics.median(r.seconds for r in rs) for case, rs in cases.items()}
    for case, rs in cases.items():
        print(f"{case}: loss -> step 2 running again (s): {summary([r.seconds for r in rs])}")
    rows = "\n".join(
        f"| {case} | {summary([r.seconds for r in rs])} | **{medians[case]:.2f}** | "
        f"{sum(r.after_expiry for r in rs)} of {len(rs)} | "
        f"{statistics.fmean(r.lost_in_flight for r in rs):.1f} |"
        for case, rs in cases.items()
    )
    ttl, reaper = settings.lease_ttl_s, settings.reaper_interval_s
    partitioned = cases.get("partitioned", [])
    write_report(
        "recovery",
        f"""# Recovery: a lost worker's step running again

`python -m bench.recovery --rounds {args.rounds}`: a run's step 2 is sending its calls (0.4-0.7 s
each) when the worker running it is lost; measured from the loss to step 2's next attempt
being claimed (its `started_at`). Production timings: lease {ttl:g} s renewed every
{settings.heartbeat_interval_s:g} s, reaper every {reaper:g} s, Redis visibility timeout
untouched (3600 s). Leases are tied to each worker process' PostgreSQL session
([leases](../concepts/leases.md)).

| lost | loss -> step 2 claimed again (s) | median (s) | claimed only after the lease expired | calls lost in flight per loss |
|---|---|---|---|---|
{rows}

- **pool process**: the pool process running the step is SIGKILLed (an OOM kill). Its
  parent notices within half a second (`docpipe.worker.pool_watch`: Celery alone often
  noticed only at its 5 s maintenance pass, 3-4.5 s here), puts the message back
  (`task_reject_on_worker_lost`), and a new pool process claims the step at once: the dead
  process' session, and with it its lease, is gone.
- **worker, a replica up**: the worker (parent and pool process) is SIGKILLed while a
  second worker serves the queue (a pod deleted with grace 0); beat's reaper finds the
  session gone within a second and the other worker runs the step. The killed worker is
  started again after each round.
- **only worker, restarted**: the lane's only worker is SIGKILLed and started again at once
  (as a container restart): Celery's start-up on this machine is most of the time.
- **partitioned**: a worker in a network namespace of its own, reaching PostgreSQL, Redis
  and the provider through forwarders on the host, has its packets dropped (iptables inside
  the namespace); its session stays open on the server (no FIN arrives), so the lease has to
  expire. Bound: lease_ttl_s + reaper_interval_s = {ttl + reaper:g} s from the last renewal.
  Once healed, the partitioned worker's renewal (or result) was refused in {refused} of
  {len(partitioned)} rounds; calls it sent after its step was taken over: {late_calls}.

{_many_section(many, args.in_flight)}
Before session leases, on this branch's base (the bench had one case then, the only worker
killed and restarted): 8.58 s median of 5 (p95 8.97), the lease's TTL.
""",
        {
            "median_s": medians,
            "lost_in_flight": {
                c: statistics.fmean(r.lost_in_flight for r in rs) for c, rs in cases.items()
            },
            "partition_bound_s": ttl + reaper,
            "partition_refused": refused,
            "partition_late_calls": late_calls,
            **_many_figures(many),
        },
    )


def _many_figures(many: list[ManyRound]) -> dict[str, object]:
    if not many:
        return {}
    return {
        "threads_held_steps": min(r.held for r in many),
        "threads_all_again_s": max(max(r.seconds) for r in many),
        "threads_median_again_s": statistics.median(s for r in many for s in r.seconds),
        "threads_answered_twice": sum(r.answered_twice for r in many),
        "threads_reaped_s": max(r.reaped_s for r in many),
    }


def _many_section(many: list[ManyRound], steps: int) -> str:
    if not many:
        return ""
    rows = "\n".join(
        f"| {i + 1} | {r.held} | {r.reaped_s:.2f} | {r.published_s:.2f} | {min(r.seconds):.2f} | "
        f"{statistics.median(r.seconds):.2f} | {percentile(r.seconds, 95):.2f} | "
        f"**{max(r.seconds):.2f}** | {r.answered_twice} | {r.load:.1f} |"
        for i, r in enumerate(many)
    )
    return f"""
## A threads process holding {steps} steps

A worker of the threads pool (`DOCPIPE_WORKER_POOL=threads`, {steps} slots) holds {steps}
runs' steps at once, each waiting on a provider that answers in {SLOW_CALL_MS / 1000:g} s,
when its process is SIGKILLed; a second threads worker of {steps} slots, idle until then
(its consumer cancelled), takes them. Measured for each step held, from the kill to its
next attempt's claim. The process' {steps} leases all hang on its one lease session, so
the reaper's next pass (every {Settings().reaper_interval_s:g} s) finds every one of them
gone at once.

Phases, in seconds from the kill: the reaper's pass that handed the steps on (its
transaction's start: beat fires it every {Settings().reaper_interval_s:g} s), the start of
the publish of their 200 messages (one by one, in the transaction that marks them
published), then the standby's claims, first to last.

| round | steps held | reaped | publish began | first claim | median claim | p95 | the last of them | calls answered twice | load (1 min) |
|---|---|---|---|---|---|---|---|---|---|
{rows}
"""


if __name__ == "__main__":
    main()
