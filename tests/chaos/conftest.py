"""The chaos suite's stack and its report.

Each scenario gets a whole local stack (its own PostgreSQL, a Redis that restarts empty,
the fake provider, API, both worker pools, beat) with short production-shaped timings,
breaks something while work is running, then checks the invariants from the database and
the provider's own request log. At the end pytest prints one table: scenario, runs, done,
retried steps, duplicate paid calls, lost runs, provider requests against call-log rows,
longest stall. `make chaos` runs just this suite.

A scenario marked ``threads_pools`` runs both lanes on the threads pool
(DOCPIPE_WORKER_POOL=threads, docs/concepts/worker-pools.md), with more slots than
processes a prefork stack could afford here: many steps in flight in each process.

A scenario marked ``provider_in_namespace`` gets the fake provider in a network namespace of
its own, reached over a veth pair, so that ``chaos.provider_ns.drop()`` partitions it
(docpipe_dev.partition).

A scenario marked ``provider_batches`` gets a fake provider that declares its OpenAI batch
interface (completing each provider batch in a second), beat packing every half second, so
that batch runs asking for the provider-batch lane go through provider batches.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import httpx
import pytest

from docpipe.cli.client import DocpipeClient
from docpipe.settings.providers import DEFAULT_PRICES
from docpipe_dev.localstack import LocalRedis, free_port
from docpipe_dev.partition import NetworkNamespace
from docpipe_dev.processes import ManagedProcess, fake_llm_argv
from docpipe_dev.stack import LocalStack, StackOptions
from tests.chaos.invariants import REPORT, WEBHOOK_ENV, ChaosStack
from tests.support.processes import FAST_TIMINGS

FAKE_LATENCY_MS = "20:60"
THREADS_INTERACTIVE_SLOTS, THREADS_BATCH_SLOTS = 8, 40


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "provider_in_namespace: the fake provider runs behind a veth pair"
    )
    config.addinivalue_line("markers", "threads_pools: both worker lanes on the threads pool")
    config.addinivalue_line(
        "markers", "provider_batches: the fake provider declares its batch interface"
    )


# A failed scenario's stack is removed with its logs; the last lines of each go into the
# failure's report first (CI keeps nothing else), as they say what the processes were doing.
_LOG_LINES_KEPT = 40


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    chaos = getattr(item, "funcargs", {}).get("chaos")
    if report.failed and call.when == "call" and isinstance(chaos, ChaosStack):
        for log in sorted((chaos.stack.options.state_dir / "logs").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-_LOG_LINES_KEPT:]
            report.sections.append((f"{log.name}, its last lines", "\n".join(tail)))
    return report


@pytest.fixture
def chaos(request: pytest.FixtureRequest) -> Iterator[ChaosStack]:
    state = Path(tempfile.mkdtemp(prefix="docpipe-chaos-"))
    state.chmod(0o711)
    # The broker keeps nothing on disk: a restart is a Redis that lost every message.
    broker = LocalRedis(state / "redis", persist=False)
    broker.start()
    request_log = state / "provider-requests.log"
    env = {
        **FAST_TIMINGS,
        # A lease long enough that a worker starved of CPU (this suite shares two cores with
        # a dozen processes) still renews in time; recovery stays within seconds.
        "DOCPIPE_LEASE_TTL_S": "6",
        "DOCPIPE_REDIS_URL": broker.url,
        "DOCPIPE_API_KEY_RPM": "0",
        "DOCPIPE_CLIENT_IP_RPM": "0",
        # Every request the fake provider receives, by call id, across its restarts.
        "FAKE_LLM_REQUEST_LOG": str(request_log),
        **WEBHOOK_ENV,
    }
    batch_port = None
    if request.node.get_closest_marker("provider_batches"):
        batch_port = free_port()
        env |= _provider_batch_env(f"http://127.0.0.1:{batch_port}")
    saved = {k: os.environ.get(k) for k in (*env, "DOCPIPE_DATABASE_URL", "DOCPIPE_LLM_BASE_URL")}
    os.environ.update(env)
    os.environ.pop("DOCPIPE_DATABASE_URL", None)
    os.environ.pop("DOCPIPE_LLM_BASE_URL", None)
    with contextlib.ExitStack() as cleanup:
        provider_ns = None
        if request.node.get_closest_marker("provider_in_namespace"):
            provider_ns = cleanup.enter_context(NetworkNamespace())
            os.environ["DOCPIPE_LLM_BASE_URL"] = _start_provider_in(provider_ns, state)
        if batch_port is not None:
            cleanup.enter_context(_batch_provider(batch_port, state))
            os.environ["DOCPIPE_LLM_BASE_URL"] = f"http://127.0.0.1:{batch_port}/v1"
        threads = request.node.get_closest_marker("threads_pools") is not None
        yield from _run_stack(state, broker, request_log, provider_ns, saved, threads=threads)


def _provider_batch_env(url: str) -> dict[str, str]:
    """The stack's settings for a fake provider at ``url`` with its batch interface."""
    models = {
        name: {"input_per_mtok": str(p.input_per_mtok), "output_per_mtok": str(p.output_per_mtok)}
        for name, p in DEFAULT_PRICES.items()
    }
    batch = {"completion_window": "1h"}
    spec = {"name": "fake", "base_url": f"{url}/v1", "models": models, "batch": batch}
    return {
        "DOCPIPE_PROVIDERS": json.dumps([spec]),
        "DOCPIPE_PROVIDER_BATCH_INTERVAL_S": "0.5",
        "DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S": "1",
    }


@contextlib.contextmanager
def _batch_provider(port: int, state: Path) -> Iterator[None]:
    """The fake provider on ``port``, each provider batch completing in a second (it
    inherits FAKE_LLM_REQUEST_LOG: every request a provider batch processes is logged)."""
    argv = [
        *fake_llm_argv(host="127.0.0.1", port=port, latency_ms=FAKE_LATENCY_MS),
        "--batch-completion-s",
        "1",
    ]
    provider = ManagedProcess("fake-llm", argv, state / "fake-llm-batches.log").start()
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        deadline = time.monotonic() + 30
        while not _healthy(url):
            if time.monotonic() > deadline or not provider.alive():
                raise RuntimeError(f"the provider did not start: {provider.log_text()}")
            time.sleep(0.1)
        yield
    finally:
        provider.stop(timeout_s=10)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _start_provider_in(ns: NetworkNamespace, state: Path) -> str:
    """The fake provider inside ``ns`` (the stack then starts none); returns its base URL."""
    argv = fake_llm_argv(host=ns.address, port=8100, latency_ms=FAKE_LATENCY_MS)
    provider = ns.start("fake-llm", argv, state / "fake-llm-ns.log")
    url = f"http://{ns.address}:8100"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return f"{url}/v1"
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or not provider.alive():
            raise RuntimeError(f"the namespaced provider did not start: {provider.log_text()}")
        time.sleep(0.1)


def _run_stack(
    state: Path,
    broker: LocalRedis,
    request_log: Path,
    provider_ns: NetworkNamespace | None,
    saved: dict[str, str | None],
    *,
    threads: bool,
) -> Iterator[ChaosStack]:
    pool = "threads" if threads else "prefork"
    stack = LocalStack(
        StackOptions(
            state_dir=state / "stack",
            api_port=free_port(),
            # Threads: a slot costs a thread, so each process holds many steps in flight.
            interactive_concurrency=THREADS_INTERACTIVE_SLOTS if threads else 2,
            batch_concurrency=THREADS_BATCH_SLOTS if threads else 3,
            interactive_pool=pool,
            batch_pool=pool,
            fake_latency_ms=FAKE_LATENCY_MS,
            metrics_port=0,
        )
    )
    try:
        stack.up()
        with DocpipeClient(stack.api_url, api_key=stack.api_key, timeout_s=120) as client:
            yield ChaosStack(
                stack=stack,
                client=client,
                broker=broker,
                request_log=request_log,
                provider_ns=provider_ns,
            )
    finally:
        stack.down()
        broker.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(state, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REPORT:
        return
    header = (
        "scenario",
        "runs",
        "done",
        "retried steps",
        "dup. paid calls",
        "lost",
        "provider reqs = call rows",
        "longest stall s",
        "faults",
    )
    rows = [header, *[r.row() for r in REPORT]]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    terminalreporter.section("chaos suite")
    for row in rows:
        terminalreporter.write_line(
            "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        )
