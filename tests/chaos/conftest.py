"""The chaos suite's stack and its report.

Each scenario gets a whole local stack (its own PostgreSQL, a Redis that restarts empty,
the fake provider, API, both worker pools, beat) with short production-shaped timings,
breaks something while work is running, then checks the invariants from the database.
At the end pytest prints one table: scenario, runs, done, retried steps, duplicate paid
calls, lost runs, longest stall. `make chaos` runs just this suite.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from docpipe.cli.client import DocpipeClient
from docpipe_dev.localstack import LocalRedis, free_port
from docpipe_dev.stack import LocalStack, StackOptions
from tests.chaos.invariants import REPORT, WEBHOOK_ENV, ChaosStack
from tests.processes import FAST_TIMINGS


@pytest.fixture
def chaos() -> Iterator[ChaosStack]:
    state = Path(tempfile.mkdtemp(prefix="docpipe-chaos-"))
    state.chmod(0o711)
    # The broker keeps nothing on disk: a restart is a Redis that lost every message.
    broker = LocalRedis(state / "redis", persist=False)
    broker.start()
    env = {
        **FAST_TIMINGS,
        # A lease long enough that a worker starved of CPU (this suite shares two cores with
        # a dozen processes) still renews in time; recovery stays within seconds.
        "DOCPIPE_LEASE_TTL_S": "6",
        "DOCPIPE_REDIS_URL": broker.url,
        "DOCPIPE_API_KEY_RPM": "0",
        **WEBHOOK_ENV,
    }
    saved = {k: os.environ.get(k) for k in (*env, "DOCPIPE_DATABASE_URL", "DOCPIPE_LLM_BASE_URL")}
    os.environ.update(env)
    os.environ.pop("DOCPIPE_DATABASE_URL", None)
    os.environ.pop("DOCPIPE_LLM_BASE_URL", None)
    stack = LocalStack(
        StackOptions(
            state_dir=state / "stack",
            api_port=free_port(),
            interactive_concurrency=2,
            batch_concurrency=3,
            fake_latency_ms="20:60",
            metrics_port=0,
        )
    )
    try:
        stack.up()
        with DocpipeClient(stack.api_url, api_key=stack.api_key, timeout_s=120) as client:
            yield ChaosStack(stack=stack, client=client, broker=broker)
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
              "longest stall s", "faults")  # fmt: skip
    rows = [header, *[r.row() for r in REPORT]]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    terminalreporter.section("chaos suite")
    for row in rows:
        terminalreporter.write_line(
            "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        )
