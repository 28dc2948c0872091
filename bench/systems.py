"""The systems under comparison behind one interface, sharing one bench stack's servers.

Every system runs ``document_extract:v1`` against the same fake provider; docpipe uses the
stack's PostgreSQL database and Redis DB 0, the Celery peers Redis DB 1, DBOS a PostgreSQL
database of its own on the same server. A run is measured from just before submission to
the last document's end (each system's own timestamp of it, same machine clock), with the
CPU seconds of every process involved, per component, from /proc.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

from bench.harness import ROOT, Bench, wait_for
from bench.peers.celery_common import create_app
from bench.procstat import cpu_seconds, tree_pids
from docpipe.pipelines.document_extract import locate_sections
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts

__all__ = [
    "Document",
    "RunResult",
    "System",
    "bare_system",
    "celery_system",
    "dbos_system",
    "docpipe_system",
    "documents",
    "rounds",
]

Document = tuple[str, str]  # (id, text)
ORCHESTRATION = ("workers", "postgres", "redis", "submit")  # what "orchestration CPU" sums


def documents(count: int, prefix: str = "d") -> list[Document]:
    return [(f"{prefix}{i}", c.text) for i, c in enumerate(sample_contracts(count))]


def rounds(text: str, parallel: int) -> int:
    """Sequential provider round trips one document needs at best: 1 (sections) +
    ceil(sections / parallel) (fields) + 1 (summary)."""
    from docpipe_fake_llm.reader import answer_step  # what the fake provider answers

    sections = locate_sections(text, answer_step("extract_sections", text)["sections"])
    return 2 + math.ceil(len(sections) / parallel)


@dataclass
class RunResult:
    system: str
    docs: int
    concurrency: int
    latency_s: float
    elapsed_s: float
    calls: int  # provider requests, counted by the provider
    cpu_s: dict[str, float]  # component -> CPU seconds during the run
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return 3 * self.docs

    @property
    def docs_per_s(self) -> float:
        return self.docs / self.elapsed_s

    @property
    def orchestration_cpu_s(self) -> float:
        return sum(v for k, v in self.cpu_s.items() if k in ORCHESTRATION)

    def as_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "docs": self.docs,
            "concurrency": self.concurrency,
            "latency_s": self.latency_s,
            "elapsed_s": self.elapsed_s,
            "calls": self.calls,
            "docs_per_s": self.docs_per_s,
            "cpu_s": self.cpu_s,
            "notes": self.notes,
        }


@dataclass
class System:
    """One orchestrator: how to start it, feed it documents and see them finished."""

    name: str
    label: str
    start: Callable[[int], None]  # concurrency
    stop: Callable[[], None]
    submit: Callable[[Sequence[Document]], None]
    finished: Callable[[], tuple[int, float]]  # (documents done, unix time of the last)
    processes: Callable[[], list[int]]  # the orchestrator's own processes (pids, fresh)
    store: str  # "postgres" | "redis" | "postgres+redis" | ""
    reset: Callable[[], None] = lambda: None
    # SIGKILL the whole worker (every process of it, as a node loss would), then start it
    # again at once.
    crash: Callable[[], None] = lambda: None


class Servers:
    """The bench stack's PostgreSQL, Redis and fake provider, for every system."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        stack = bench.stack
        assert stack.postgres is not None and stack.redis is not None, "needs a local stack"
        self.postgres = stack.postgres
        self.redis_url = stack.env["DOCPIPE_REDIS_URL"]
        self.fake = httpx.Client(base_url=bench.fake_url, timeout=30)
        self.logs = Path(stack.options.state_dir).resolve() / "logs"

    def postgres_pids(self) -> list[int]:
        pid_file = self.postgres.pgdata / "postmaster.pid"
        return tree_pids(int(pid_file.read_text().split()[0]))

    def redis_pids(self) -> list[int]:
        return [int(redis.Redis.from_url(self.redis_url).info("server")["process_id"])]

    def fake_pids(self) -> list[int]:
        return tree_pids(self.bench.stack.process("fake-llm").pid)

    def set_latency(self, latency_s: float) -> None:
        ms = round(latency_s * 1000)
        self.fake.post("/control/config", json={"latency_ms": [ms, ms]}).raise_for_status()

    def provider_calls(self) -> int:
        return int(self.fake.get("/control/stats").json()["requests_total"])

    def provider_stats(self) -> dict[str, Any]:
        return dict(self.fake.get("/control/stats").json())

    def reset_provider(self) -> None:
        latency = self.fake.get("/control/config").json()["latency_ms"]
        self.fake.post("/control/reset").raise_for_status()  # counters and start-up settings
        self.fake.post("/control/config", json={"latency_ms": latency}).raise_for_status()

    def peer_env(self) -> dict[str, str]:
        return {
            "PEER_REDIS_URL": self.redis_url.rsplit("/", 1)[0] + "/1",
            "PEER_LLM_BASE_URL": self.bench.stack.env["DOCPIPE_LLM_BASE_URL"],
            "PYTHONPATH": _python_path(),
        }


def _python_path() -> str:
    """ROOT after any PYTHONPATH given (an A/B run of an earlier tree puts its sources
    there), so that the peers and the stacks started after them keep using that tree."""
    given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([*given, str(ROOT)]))


def measure(
    servers: Servers,
    system: System,
    docs: Sequence[Document],
    *,
    concurrency: int,
    latency_s: float,
    timeout_s: float = 3600,
) -> RunResult:
    """Submit ``docs`` to a started ``system`` and wait for all of them to finish."""
    servers.reset_provider()
    servers.set_latency(latency_s)
    groups: dict[str, Callable[[], list[int]]] = {
        "workers": system.processes,
        "postgres": servers.postgres_pids if "postgres" in system.store else list,
        "redis": servers.redis_pids if "redis" in system.store else list,
        "provider": servers.fake_pids,
    }
    before = {name: cpu_seconds(pids()) for name, pids in groups.items()}
    done_before, _ = system.finished()
    started = time.time()
    submit_cpu = time.process_time()
    system.submit(docs)
    submit_cpu = time.process_time() - submit_cpu
    submitted = time.time() - started

    def all_done() -> tuple[int, float] | None:
        done, last = system.finished()
        return (done, last) if done - done_before >= len(docs) else None

    _, last = wait_for(all_done, timeout_s=timeout_s, every_s=0.2)
    cpu = {name: cpu_seconds(pids()) - before[name] for name, pids in groups.items()}
    cpu["submit"] = submit_cpu
    return RunResult(
        system=system.name,
        docs=len(docs),
        concurrency=concurrency,
        latency_s=latency_s,
        elapsed_s=last - started,
        calls=servers.provider_calls(),
        cpu_s=cpu,
        notes={"submit_s": submitted},
    )


# --- docpipe ------------------------------------------------------------------------------


def docpipe_system(servers: Servers) -> System:
    """docpipe as deployed: documents in through ``POST /batches``, the batch worker pool
    (and beat, the interactive pool, the API) doing the work."""
    bench = servers.bench
    names = ("worker-batch", "worker-interactive", "beat", "api")

    def processes() -> list[int]:
        return tree_pids(*(p.pid for p in bench.stack.processes if p.name in names))

    def submit(docs: Sequence[Document]) -> None:
        bench.client.submit_batch([{"id": i, "text": t} for i, t in docs])

    def finished() -> tuple[int, float]:
        row = bench.sql(
            "SELECT count(*) AS n, extract(epoch FROM max(finished_at))::float AS last"
            " FROM pipeline_run WHERE status = 'done'"
        )[0]
        return int(row["n"]), float(row["last"] or 0)

    def crash() -> None:
        for name in ("worker-batch", "worker-interactive"):
            bench.stack.replace(name, kill=True)

    return System(
        name="docpipe",
        label="docpipe",
        start=lambda c: None,
        stop=lambda: None,
        submit=submit,
        finished=finished,
        processes=processes,
        store="postgres+redis",
        crash=crash,
    )


# --- plain Celery (a) and (b) -------------------------------------------------------------


def celery_system(
    servers: Servers, kind: str, *, visibility_timeout_s: float | None = None
) -> System:
    """Peer (a) ``whole``: the pipeline in one task; (b) ``steps``: one task per step."""
    module = {"whole": "bench.peers.celery_whole", "steps": "bench.peers.celery_steps"}[kind]
    env = servers.peer_env()
    if visibility_timeout_s is not None:
        env["PEER_VISIBILITY_TIMEOUT_S"] = str(visibility_timeout_s)
    os.environ.update(env)
    broker = redis.Redis.from_url(env["PEER_REDIS_URL"])
    publisher = create_app(f"peer-{kind}-publisher")  # on this system's broker
    state: dict[str, ManagedProcess] = {}

    def start(concurrency: int) -> None:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            module,
            "worker",
            "--queues",
            "peer",
            "--concurrency",
            str(concurrency),
            "--pool",
            "prefork",
            "--loglevel",
            "WARNING",
            "--hostname",
            f"peer-{kind}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        log = servers.logs / f"peer-celery-{kind}-{time.time_ns()}.log"
        proc = ManagedProcess(f"peer-celery-{kind}", argv, log, env=env).start()
        state["proc"], state["concurrency"] = proc, concurrency
        wait_for(lambda: _celery_ready(proc), timeout_s=60)

    def stop() -> None:
        if proc := state.pop("proc", None):
            proc.stop(timeout_s=30)

    def submit(docs: Sequence[Document]) -> None:
        submitter = _import(module).submit
        for doc_id, text in docs:
            submitter(publisher, doc_id, text)

    def finished() -> tuple[int, float]:
        stamps = broker.hvals("peer:done")
        return len(stamps), max((float(s) for s in stamps), default=0.0)

    def processes() -> list[int]:
        return tree_pids(state["proc"].pid) if "proc" in state else []

    def reset() -> None:
        broker.flushdb()

    def crash() -> None:
        state["proc"].kill_group()
        start(state["concurrency"])

    label = {"whole": "Celery, one task per document", "steps": "Celery, one task per step"}
    return System(
        name=f"celery-{kind}",
        label=label[kind],
        start=start,
        stop=stop,
        submit=submit,
        finished=finished,
        processes=processes,
        store="redis",
        reset=reset,
        crash=crash,
    )


def _celery_ready(proc: ManagedProcess) -> bool:
    if not proc.alive():
        raise RuntimeError(f"{proc.name} exited:\n{proc.log_text()[-3000:]}")
    # At WARNING level Celery prints nothing when ready; ask the worker itself.
    from celery import Celery

    app = Celery(broker=proc.env["PEER_REDIS_URL"])
    try:
        return bool(app.control.ping(timeout=0.5))
    finally:
        app.close()


def _import(module: str) -> Any:
    import importlib

    return importlib.import_module(module)


# --- DBOS (c) -----------------------------------------------------------------------------


def dbos_system(servers: Servers, *, polling_s: float = 1.0, processes_n: int = 1) -> System:
    """Peer (c): DBOS, ``processes_n`` processes sharing the queue's concurrency."""
    url = servers.postgres.create_database("dbos_peer")
    state: dict[str, Any] = {"procs": []}

    def start(concurrency: int) -> None:
        state["concurrency"] = concurrency
        per_process = max(1, concurrency // processes_n)
        for n in range(processes_n):
            argv = [
                sys.executable,
                "-m",
                "bench.peers.dbos_app",
                "--database-url",
                url,
                "--concurrency",
                str(per_process),
                "--polling-s",
                str(polling_s),
                "--executor-id",
                f"peer-{n}",
            ]
            log = servers.logs / f"peer-dbos-{n}-{time.time_ns()}.log"
            proc = ManagedProcess(f"peer-dbos-{n}", argv, log, env=servers.peer_env()).start()
            proc.wait_for_log("dbos peer ready", timeout_s=120)
            state["procs"].append(proc)

    def stop() -> None:
        for proc in state["procs"]:
            proc.stop(timeout_s=30)
        state["procs"] = []
        if client := state.pop("client", None):
            client.destroy()

    def submit(docs: Sequence[Document]) -> None:
        from dbos import DBOSClient

        if "client" not in state:
            state["client"] = DBOSClient(system_database_url=url)
        client = state["client"]
        options: Any = {"queue_name": "pipeline", "workflow_name": "pipeline_workflow"}
        for doc_id, text in docs:
            client.enqueue(options, doc_id, text)

    def finished() -> tuple[int, float]:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*), max(updated_at) FROM dbos.workflow_status"
                " WHERE status = 'SUCCESS' AND name = 'pipeline_workflow'"
            ).fetchone()
        assert row is not None
        return int(row[0]), (row[1] or 0) / 1000  # updated_at is in epoch milliseconds

    def processes() -> list[int]:
        return tree_pids(*(p.pid for p in state["procs"]))

    def reset() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DELETE FROM dbos.workflow_status")

    def crash() -> None:
        for proc in state["procs"]:
            proc.kill_group()
        state["procs"] = []
        start(state["concurrency"])  # same executor ids: DBOS recovers their workflows

    suffix = "" if polling_s == 1.0 else f", queue polled every {polling_s:g} s"
    procs = "" if processes_n == 1 else f", {processes_n} processes"
    return System(
        name=f"dbos{'' if polling_s == 1.0 else f'-poll{polling_s:g}'}"
        f"{'' if processes_n == 1 else f'-x{processes_n}'}",
        label=f"DBOS{suffix}{procs}",
        start=start,
        stop=stop,
        submit=submit,
        finished=finished,
        processes=processes,
        store="postgres",
        reset=reset,
        crash=crash,
    )


# --- no orchestrator at all: the floor ----------------------------------------------------


def bare_system(servers: Servers) -> System:
    """The pipeline in this process, ``concurrency`` documents at a time in threads: no
    queue, no state. The floor for wall time per step (at concurrency 1 it is exact)."""
    env = servers.peer_env()
    state: dict[str, Any] = {"done": [], "concurrency": 1}

    def start(concurrency: int) -> None:
        os.environ.update(env)
        state["concurrency"] = concurrency

    def submit(docs: Sequence[Document]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from bench.peers.pipeline import run_document

        def one(doc: Document) -> None:
            run_document(doc[1])
            state["done"].append(time.time())

        with ThreadPoolExecutor(state["concurrency"]) as pool:
            list(pool.map(one, docs))

    def finished() -> tuple[int, float]:
        return len(state["done"]), max(state["done"], default=0.0)

    return System(
        name="bare",
        label="no orchestrator (in-process loop)",
        start=start,
        stop=lambda: None,
        # Its CPU is this process' own, counted as "submit" by measure().
        submit=submit,
        finished=finished,
        processes=list,
        store="",
    )
