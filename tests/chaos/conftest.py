"""The chaos suite's stack and its report.

Each scenario gets a whole local stack (its own PostgreSQL, a Redis that restarts empty,
the fake provider, API, both worker pools, beat) with short production-shaped timings,
breaks something while work is running, then checks the invariants from the database and
the provider's own request log. At the end pytest prints one table: scenario, runs, done,
retried steps, duplicate paid calls, lost runs, provider requests against call-log rows,
longest stall. `make chaos` runs just this suite.

A scenario marked ``provider_in_namespace`` gets the fake provider in a network namespace of
its own, reached over a veth pair, so that ``chaos.provider_ns.drop()`` partitions it
(docpipe_dev.partition).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docpipe.cli.client import DocpipeClient
from docpipe_dev.localstack import LocalRedis, free_port
from docpipe_dev.partition import NetworkNamespace
from docpipe_dev.processes import fake_llm_argv
from docpipe_dev.stack import LocalStack, StackOptions
from tests.chaos.invariants import REPORT, WEBHOOK_ENV, ChaosStack
from tests.processes import FAST_TIMINGS

FAKE_LATENCY_MS = "20:60"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "provider_in_namespace: the fake provider runs behind a veth pair"
    )


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
    saved = {k: os.environ.get(k) for k in (*env, "DOCPIPE_DATABASE_URL", "DOCPIPE_LLM_BASE_URL")}
    os.environ.update(env)
    os.environ.pop("DOCPIPE_DATABASE_URL", None)
    os.environ.pop("DOCPIPE_LLM_BASE_URL", None)
    with contextlib.ExitStack() as cleanup:
        provider_ns = None
        if request.node.get_closest_marker("provider_in_namespace"):
            provider_ns = cleanup.enter_context(NetworkNamespace())
            os.environ["DOCPIPE_LLM_BASE_URL"] = _start_provider_in(provider_ns, state)
        yield from _run_stack(state, broker, request_log, provider_ns, saved)


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
) -> Iterator[ChaosStack]:
    stack = LocalStack(
        StackOptions(
            state_dir=state / "stack",
            api_port=free_port(),
            interactive_concurrency=2,
            batch_concurrency=3,
            fake_latency_ms=FAKE_LATENCY_MS,
            metrics_port=0,
        )
    )
    try:
        stack.up()
        with DocpipeClient(stack.api_url, api_key=stack.api_key, timeout_s=120) as client:
            yield ChaosStack(stack=stack, client=client, broker=broker,
                             request_log=request_log, provider_ns=provider_ns)  # fmt: skip
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
    header = ("scenario", "runs", "done", "retried steps", "dup. paid calls", "lost",
              "provider reqs = call rows", "longest stall s", "faults")  # fmt: skip
    rows = [header, *[r.row() for r in REPORT]]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    terminalreporter.section("chaos suite")
    for row in rows:
        terminalreporter.write_line(
            "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        )
