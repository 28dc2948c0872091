"""Steps in flight per worker process: docpipe's prefork and threads pools side by side, and
DBOS, with a provider that answers slowly (issue 37).

Each configuration gets a fresh stack and --docs documents through one batch; the fake
provider answers every call in --latency-s (2 s, and one run at --long-latency-s). While
the documents run, a sampler reads every half second the steps in flight (docpipe: steps
``running``; DBOS: workflows ``PENDING``), the PSS of the worker's processes (shared pages
split between the processes sharing them, /proc/PID/smaps_rollup) and the client
connections of the system's PostgreSQL database. Reported per configuration:

- documents/s against the ideal for its slots: slots / (latency x the mean provider round
  trips of a document, docs/benchmarks/throughput.md), and against the best this batch
  allows them (``batch_bound``: the ideal less what starting and ending one batch costs);
- worker PSS per step in flight, at the sample with the most steps in flight: the worker's
  whole PSS divided by them, and its growth over the idle worker divided by them;
- the worker's CPU per step (every process of the worker: the batch pool's for docpipe,
  beat, the API and the interactive pool not counted; DBOS' one process);
- PostgreSQL connections, the most seen at once (docpipe: every process of the stack);
- the CPU of the processes measured and that of the whole machine, other work included:
  the first alone says nothing about whether the CPU binds on a shared machine.

    python -m bench.in_flight [--docs 1000] [--prefork-docs 120] [--latency-s 2]
        [--long-latency-s 10] [--long-docs 1000] [--only NAME,...] [--worker-env NAME=VALUE]

--worker-env (repeatable) goes to docpipe's batch workers only, not to the rest of the
stack: an allocator's settings (MALLOC_ARENA_MAX=2, LD_PRELOAD=...) compared on the worker
alone. Each row of the report names the environment it was measured with. A threads
pool's workers are given docpipe_dev.stack.THREADS_POOL_ENV unless this sets the same names:
`--worker-env GLIBC_TUNABLES=` measures glibc's defaults.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from bench.harness import REPORTS, bench_stack, write_report
from bench.procstat import cpu_seconds, machine_busy_seconds, memory, tree_pids
from bench.systems import Servers, System, dbos_system, docpipe_system, documents, measure, rounds

MB = 1024 * 1024
SAMPLE_EVERY_S = 0.5
# Room for the slowest step at 10 s a call: a document's fields take up to 7 rounds.
LIMITS = {
    "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "240",
    "DOCPIPE_TASK_TIME_LIMIT_S": "300",
    "DOCPIPE_LLM_TIMEOUT_S": "30",
}
# The provider's own concurrency bound is the fleet's: wide enough that the slots bind.
WIDE_PROVIDER = {"DOCPIPE_PROVIDER_MAX_CONCURRENCY": "4000"}


@dataclass(frozen=True)
class Config:
    name: str
    label: str
    pool: str  # prefork | threads | dbos
    processes: int
    slots_per_process: int

    @property
    def slots(self) -> int:
        return self.processes * self.slots_per_process


def batch_bound(rounds_per_doc: Sequence[int], slots: int, latency_s: float) -> float:
    """The most documents/s ``slots`` can reach on this one batch at no cost of their own:
    each document holds a slot for its rounds one after the other, the documents start in
    order as slots free up, and the batch ends with its last document. Below the ideal
    (slots / (mean rounds x latency)) by the batch's last wave, where slots run out of
    documents: the fewer waves (documents / slots), the larger that share."""
    free_at = [0.0] * slots
    end = 0.0
    for rounds_of_doc in rounds_per_doc:
        ends = heapq.heappop(free_at) + rounds_of_doc * latency_s
        end = max(end, ends)
        heapq.heappush(free_at, ends)
    return len(rounds_per_doc) / end if end else 0.0


CONFIGS = (
    Config("prefork-8", "docpipe, prefork, 8 processes", "prefork", 1, 8),
    Config("threads-1x200", "docpipe, threads, 1 process of 200 slots", "threads", 1, 200),
    Config("threads-2x200", "docpipe, threads, 2 processes of 200 slots", "threads", 2, 200),
    Config("dbos-200", "DBOS, 200 workflows in 1 process", "dbos", 1, 200),
)


@dataclass
class Sample:
    at: float
    in_flight: int
    pss_bytes: int
    connections: int


@dataclass
class Outcome:
    config: str
    label: str
    slots: int
    docs: int
    latency_s: float
    elapsed_s: float
    docs_per_s: float
    ideal_docs_per_s: float
    share_of_ideal: float
    most_in_flight: int
    pss_mb_at_most: float
    idle_pss_mb: float
    pss_mb_per_step_in_flight: float
    pss_growth_mb_per_step_in_flight: float
    worker_cpu_ms_per_step: float
    machine_cpu_share: float  # CPU of every process measured / (elapsed x cores)
    most_connections: int
    load_average: float
    calls: int
    # Reports written before these were measured load with the defaults (unknown).
    batch_bound_docs_per_s: float = 0.0
    mean_in_flight: float = 0.0  # over the samples of the run: slots busy on average
    slot_s_per_round: float = 0.0  # slot time the run held / its provider round trips
    worker_cores: float = 0.0  # the worker's CPU / the run's time: one threads process tops 1
    machine_busy_share: float = -1.0  # CPU of the whole machine / (wall time x cores)
    worker_env: dict[str, str] = field(default_factory=dict)  # --worker-env
    measured: str = field(
        default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    )
    samples: list[Sample] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("samples")
        return data


class Sampler:
    """Reads steps in flight, worker PSS and connections every SAMPLE_EVERY_S in a thread."""

    def __init__(
        self,
        in_flight: Callable[[], int],
        pids: Callable[[], list[int]],
        connections: Callable[[], int],
    ) -> None:
        self._in_flight, self._pids, self._connections = in_flight, pids, connections
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def pss_bytes(self) -> int:
        total = 0
        for pid in self._pids():
            try:
                total += memory(pid).pss_bytes
            except OSError:  # a process that just ended
                continue
        return total

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self.samples.append(
                Sample(time.time(), self._in_flight(), self.pss_bytes(), self._connections())
            )

    @contextmanager
    def running(self) -> Iterator[Sampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


def count(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query.encode()).fetchone()
    return int(row[0]) if row else 0


def connections_query(database: str) -> str:
    return (
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        f" AND datname = '{database}' AND pid <> pg_backend_pid()"
    )


def run_one(
    servers: Servers,
    system: System,
    config: Config,
    docs: Sequence[tuple[str, str]],
    *,
    latency_s: float,
    mean_rounds: float,
    worker_pids: Callable[[], list[int]],
    in_flight: Callable[[], int],
    connections: Callable[[], int],
) -> Outcome:
    sampler = Sampler(in_flight, worker_pids, connections)
    rounds_per_doc = [rounds(text, 4) for _, text in docs]
    idle_pss = sampler.pss_bytes()
    cpu_before = cpu_seconds(worker_pids())
    busy_before, wall_before = machine_busy_seconds(), time.monotonic()
    with sampler.running():
        result = measure(servers, system, docs, concurrency=config.slots, latency_s=latency_s)
    worker_cpu = cpu_seconds(worker_pids()) - cpu_before
    machine_busy = machine_busy_seconds() - busy_before
    wall = time.monotonic() - wall_before
    most = max(sampler.samples, key=lambda s: (s.in_flight, s.pss_bytes))
    mean_in_flight = statistics.fmean(s.in_flight for s in sampler.samples)
    ideal = config.slots / (latency_s * mean_rounds)
    steps = 3 * len(docs)
    measured_cpu = sum(result.cpu_s.values())
    outcome = Outcome(
        config=config.name,
        label=config.label,
        slots=config.slots,
        docs=len(docs),
        latency_s=latency_s,
        elapsed_s=result.elapsed_s,
        docs_per_s=result.docs_per_s,
        ideal_docs_per_s=ideal,
        share_of_ideal=result.docs_per_s / ideal,
        most_in_flight=most.in_flight,
        pss_mb_at_most=most.pss_bytes / MB,
        idle_pss_mb=idle_pss / MB,
        pss_mb_per_step_in_flight=most.pss_bytes / MB / max(1, most.in_flight),
        pss_growth_mb_per_step_in_flight=(most.pss_bytes - idle_pss) / MB / max(1, most.in_flight),
        worker_cpu_ms_per_step=1000 * worker_cpu / steps,
        machine_cpu_share=measured_cpu / (result.elapsed_s * (os.cpu_count() or 1)),
        most_connections=max(s.connections for s in sampler.samples),
        load_average=os.getloadavg()[1],
        calls=result.calls,
        batch_bound_docs_per_s=batch_bound(rounds_per_doc, config.slots, latency_s),
        mean_in_flight=mean_in_flight,
        slot_s_per_round=mean_in_flight * result.elapsed_s / sum(rounds_per_doc),
        worker_cores=worker_cpu / result.elapsed_s,
        machine_busy_share=machine_busy / (wall * (os.cpu_count() or 1)),
        samples=sampler.samples,
    )
    print(
        f"{config.label} at {latency_s:g} s: {outcome.docs_per_s:.2f} documents/s "
        f"({outcome.share_of_ideal:.0%} of {ideal:.2f}; the batch allows "
        f"{outcome.batch_bound_docs_per_s:.2f}), {outcome.most_in_flight} in flight "
        f"(mean {mean_in_flight:.0f}, a slot held {outcome.slot_s_per_round:.2f} s a round), "
        f"{outcome.pss_mb_per_step_in_flight:.2f} MB PSS per step in flight "
        f"(growth {outcome.pss_growth_mb_per_step_in_flight:.2f}), "
        f"{outcome.worker_cpu_ms_per_step:.1f} ms CPU per step "
        f"({outcome.worker_cores:.2f} cores), "
        f"{outcome.most_connections} connections; CPU: its processes "
        f"{outcome.machine_cpu_share:.0%}, the machine {outcome.machine_busy_share:.0%} "
        f"(load {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    return outcome


def docpipe_runs(
    config: Config,
    runs: Sequence[tuple[Sequence[tuple[str, str]], float]],
    mean_rounds: float,
    worker_env: dict[str, str],
) -> list[Outcome]:
    """Every run of one docpipe configuration on one stack (a batch lane of its pool)."""
    outcomes = []
    with bench_stack(
        env={**LIMITS, **WIDE_PROVIDER},
        interactive_concurrency=1,
        batch_concurrency=config.slots_per_process,
        batch_pool=config.pool,
        batch_workers=config.processes,
        latency_ms="0:0",
        worker_env=worker_env,
    ) as bench:
        servers = Servers(bench)
        system = docpipe_system(servers)
        url = bench.database_url
        database = url.rsplit("/", 1)[1].split("?")[0]
        roots = [p.pid for p in bench.stack.processes if p.name.startswith("worker-batch")]
        for docs, latency_s in runs:
            outcomes.append(
                run_one(
                    servers,
                    system,
                    config,
                    docs,
                    latency_s=latency_s,
                    mean_rounds=mean_rounds,
                    worker_pids=lambda: tree_pids(*roots),
                    in_flight=lambda: count(
                        url, "SELECT count(*) FROM pipeline_step_result WHERE status = 'running'"
                    ),
                    connections=lambda: count(url, connections_query(database)),
                )
            )
            outcomes[-1].worker_env = dict(worker_env)
    return outcomes


def dbos_runs(
    config: Config, runs: Sequence[tuple[Sequence[tuple[str, str]], float]], mean_rounds: float
) -> list[Outcome]:
    outcomes = []
    with bench_stack(interactive_concurrency=1, batch_concurrency=1, latency_ms="0:0") as bench:
        servers = Servers(bench)
        dbos = dbos_system(servers)
        url = servers.postgres.url.rsplit("/", 1)[0] + "/dbos_peer"
        dbos.start(config.slots)
        try:
            for docs, latency_s in runs:
                dbos.reset()
                outcomes.append(
                    run_one(
                        servers,
                        dbos,
                        config,
                        docs,
                        latency_s=latency_s,
                        mean_rounds=mean_rounds,
                        worker_pids=dbos.processes,
                        in_flight=lambda: count(
                            url,
                            "SELECT count(*) FROM dbos.workflow_status WHERE status = 'PENDING'",
                        ),
                        connections=lambda: count(url, connections_query("dbos_peer")),
                    )
                )
        finally:
            dbos.stop()
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--prefork-docs", type=int, default=120)
    parser.add_argument("--latency-s", type=float, default=2.0)
    parser.add_argument("--long-latency-s", type=float, default=10.0)
    parser.add_argument("--long-docs", type=int, default=1000)
    parser.add_argument("--only", default=",".join(c.name for c in CONFIGS))
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment for docpipe's batch workers only (repeatable)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the reported runs of configurations and latencies not measured this time",
    )
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    worker_env = dict(_assignment(a, parser) for a in args.worker_env)
    corpus = documents(args.docs)
    mean_rounds = statistics.fmean(rounds(text, 4) for _, text in corpus)
    outcomes: list[Outcome] = []
    for config in CONFIGS:
        if config.name not in wanted:
            continue
        docs = corpus[: args.prefork_docs] if config.pool == "prefork" else corpus
        runs: list[tuple[Sequence[tuple[str, str]], float]] = [(docs, args.latency_s)]
        if config.name == "threads-1x200" and args.long_docs:
            long_docs = documents(args.long_docs, "long")
            runs.append((long_docs, args.long_latency_s))
        if config.pool == "dbos":
            outcomes.extend(dbos_runs(config, runs, mean_rounds))
        else:
            outcomes.extend(docpipe_runs(config, runs, mean_rounds, worker_env))
    if args.keep:
        outcomes = _kept(outcomes) + outcomes
    order = [c.name for c in CONFIGS]
    outcomes.sort(key=lambda o: (order.index(o.config), o.latency_s))
    report(outcomes, args, mean_rounds)


def _assignment(text: str, parser: argparse.ArgumentParser) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        parser.error(f"--worker-env wants NAME=VALUE, not {text!r}")
    return name, value


def _kept(measured: Sequence[Outcome]) -> list[Outcome]:
    """The runs of the last report that this one did not measure again."""
    try:
        data = json.loads((REPORTS / "in-flight.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    again = {(o.config, o.latency_s) for o in measured}
    return [
        Outcome(**{"measured": data.get("measured", "earlier"), **r})
        for r in data.get("runs", [])
        if (r["config"], r["latency_s"]) not in again
    ]


def _figures(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for o in outcomes:
        key = f"{o.config}@{o.latency_s:g}s"
        figures[key] = {
            "docs_per_s": o.docs_per_s,
            "share_of_ideal": o.share_of_ideal,
            "ideal_docs_per_s": o.ideal_docs_per_s,
            "batch_bound_docs_per_s": o.batch_bound_docs_per_s,
            "machine_busy_share": o.machine_busy_share,
            "pss_mb_per_step": o.pss_mb_per_step_in_flight,
            "pss_growth_mb_per_step": o.pss_growth_mb_per_step_in_flight,
            "cpu_ms_per_step": o.worker_cpu_ms_per_step,
            "connections": o.most_connections,
            "in_flight": o.most_in_flight,
            "pss_mb": o.pss_mb_at_most,
            "mean_in_flight": o.mean_in_flight,
            "slot_s_per_round": o.slot_s_per_round,
            "worker_cores": o.worker_cores,
            "worker_env": o.worker_env,
        }
    return figures


def _bound(o: Outcome) -> str:
    if not o.batch_bound_docs_per_s:
        return "-"  # a row kept from a report that did not compute it
    return f"{o.batch_bound_docs_per_s:.2f} ({o.batch_bound_docs_per_s / o.ideal_docs_per_s:.0%})"


def _held(o: Outcome) -> str:
    if not o.slot_s_per_round:
        return "-"  # a row kept from a report that did not measure it
    return f"{o.mean_in_flight:.0f}; {o.slot_s_per_round:.2f} s"


def _busy(o: Outcome) -> str:
    return f"{o.machine_busy_share:.0%}" if o.machine_busy_share >= 0 else "-"


def _env(o: Outcome) -> str:
    return " ".join(f"`{k}={v}`" for k, v in sorted(o.worker_env.items())) or "-"


def report(outcomes: Sequence[Outcome], args: argparse.Namespace, mean_rounds: float) -> None:
    (REPORTS / "in-flight.json").write_text(
        json.dumps({"runs": [o.as_dict() for o in outcomes]}, indent=1) + "\n"
    )
    rows = "\n".join(
        f"| {o.label} | {o.latency_s:g} s | {o.docs} | {o.docs_per_s:.2f} | "
        f"{o.ideal_docs_per_s:.2f} | {o.share_of_ideal:.0%} | {_bound(o)} | {o.most_in_flight} | "
        f"{_held(o)} | "
        f"{o.pss_mb_at_most:.0f} | {o.pss_mb_per_step_in_flight:.2f} | "
        f"{o.pss_growth_mb_per_step_in_flight:.2f} | {o.worker_cpu_ms_per_step:.1f} | "
        f"{o.worker_cores:.2f} | "
        f"{o.machine_cpu_share:.0%} | {_busy(o)} | {o.most_connections} | {o.measured} |"
        f" {_env(o)} |"
        for o in outcomes
    )
    command = (
        f"python -m bench.in_flight --docs {args.docs} --prefork-docs {args.prefork_docs} "
        f"--latency-s {args.latency_s:g} --long-latency-s {args.long_latency_s:g} "
        f"--long-docs {args.long_docs}"
        + "".join(f" --worker-env {a}" for a in args.worker_env)
        + (f" --only {args.only} --keep" if args.keep else "")
    )
    markdown = f"""# Steps in flight per worker process

`{command}`: the sample contracts through one batch, the fake provider answering every call
in the latency shown; a fresh stack per docpipe configuration (its batch lane's pool as
named, an interactive pool of one process, beat, the API), DBOS on the same PostgreSQL in a
database of its own. A document needs {mean_rounds:.2f} provider round trips one after the
other, so the ideal for S slots is S / ({mean_rounds:.2f} x latency) documents/s.

| system | per call | documents | documents/s | ideal | share of ideal | the batch allows | most steps in flight | mean steps in flight; slot time a round | worker PSS (MB) | PSS per step in flight (MB) | PSS growth per step in flight (MB) | worker CPU per step (ms) | worker's cores | CPU of its processes | CPU of the machine | most PostgreSQL connections | measured | worker environment |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
{rows}

- **mean steps in flight; slot time a round**: the steps in flight averaged over the run's
  samples (what is below the slots is slots left empty), and the slot time the run held
  (that mean x its time) over the provider round trips its documents need: above the
  latency is what a round costs a slot besides the provider's answer (queue hops, claims,
  PostgreSQL, the GIL).
- **PSS per step in flight** is the worker's whole PSS (main process and pool processes,
  shared pages split between them) at the sample with the most steps in flight, divided by
  them; **growth** is what the worker gained over its idle self, divided the same way: what
  one more step in flight costs.
- **worker CPU per step**: CPU of the worker's processes over the run / (3 x documents);
  for docpipe the batch worker(s) only (beat, the API and the interactive pool apart).
  **worker's cores**: the same CPU over the run's time. A threads process runs its Python
  on one core at a time (the GIL): near 1 a process, its CPU binds, however idle its slots.
- **the batch allows**: the most documents/s the slots could reach on this one batch at no
  cost of their own (documents started in order as slots free up, each holding its slot
  for its rounds; the batch ends with its last document), and its share of the ideal.
  With few waves (documents / slots) the last one leaves many slots empty.
- **CPU of its processes**: CPU of every process measured (workers, PostgreSQL, Redis, the
  fake provider, the submitting client) over the run's time and this machine's
  {os.cpu_count()} cores. **CPU of the machine**: what every process of the machine used
  over the same time (/proc/stat), other work included: near 100 % the CPU binds, not the
  slots, however low the first figure. This machine is shared with other work (load
  average over 5 minutes beside each run in the JSON).
- **measured**: `--keep` reruns some configurations and keeps the others' rows; each row
  says when it was measured.
- **worker environment**: what `--worker-env` gave docpipe's batch workers alone (an
  allocator's settings, say), over what the stack gives every threads worker
  (GLIBC_TUNABLES, docs/concepts/worker-pools.md); `-` none.
- **PostgreSQL connections**: the most client connections to the system's database seen
  at once; for docpipe that is every process of the stack (the API's pool, beat, both
  worker lanes' pools and lease sessions).
"""
    print(markdown)
    write_report("in-flight", markdown, _figures(outcomes))


if __name__ == "__main__":
    main()
