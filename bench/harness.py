"""What every benchmark needs: a fresh local stack, a client, the database, timing helpers.

Benchmarks print their numbers and append a markdown section to docs/benchmarks/; they
never assert on timings (tests do not either).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from docpipe.cli.client import DocpipeClient
from docpipe_dev.localstack import free_port
from docpipe_dev.stack import LocalStack, StackOptions

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "docs" / "benchmarks"
ENDED = {"done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded"}


@dataclass
class Bench:
    stack: LocalStack
    client: DocpipeClient

    @property
    def database_url(self) -> str:
        return self.stack.env["DOCPIPE_DATABASE_URL"]

    @property
    def fake_url(self) -> str:
        url = self.stack.env.get("DOCPIPE_LLM_BASE_URL") or os.environ["DOCPIPE_LLM_BASE_URL"]
        return url.removesuffix("/v1")

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        with psycopg.connect(self.database_url, autocommit=True, row_factory=dict_row) as conn:
            return conn.execute(query.encode(), params).fetchall()

    def scalar(self, query: str, *params: Any) -> Any:
        """The first column of the first row, or None when there is no row."""
        rows = self.sql(query, *params)
        return next(iter(rows[0].values())) if rows else None


@contextmanager
def bench_stack(
    *,
    env: dict[str, str] | None = None,
    interactive_concurrency: int = 4,
    batch_concurrency: int = 4,
    batch_pool: str = "prefork",
    batch_workers: int = 1,
    interactive_pool: str = "prefork",
    latency_ms: str = "300:1500",
    rpm: int = 0,
    metrics_port: int = 0,
    worker_env: dict[str, str] | None = None,
) -> Iterator[Bench]:
    """A whole docpipe stack on fresh PostgreSQL and Redis, torn down afterwards.
    ``worker_env`` goes to the batch lane's workers only; ``env`` to every process."""
    state = Path(tempfile.mkdtemp(prefix="docpipe-bench-"))
    state.chmod(0o711)
    # Benchmarks poll the API far more than a client should; no per-key or per-address
    # request limit.
    env = {"DOCPIPE_API_KEY_RPM": "0", "DOCPIPE_CLIENT_IP_RPM": "0", **(env or {})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    for name in ("DOCPIPE_DATABASE_URL", "DOCPIPE_REDIS_URL", "DOCPIPE_LLM_BASE_URL"):
        if name not in env:  # a provider the benchmark started itself is kept
            os.environ.pop(name, None)
    stack = LocalStack(
        StackOptions(
            state_dir=state,
            api_port=free_port(),
            interactive_concurrency=interactive_concurrency,
            batch_concurrency=batch_concurrency,
            batch_pool=batch_pool,
            batch_workers=batch_workers,
            interactive_pool=interactive_pool,
            fake_latency_ms=latency_ms,
            fake_rpm=rpm,
            metrics_port=metrics_port,  # 0: off, so that benchmarks never fight over ports
            batch_worker_env=worker_env or {},
        )
    )
    try:
        stack.up()
        with DocpipeClient(stack.api_url, api_key=stack.api_key, timeout_s=600) as client:
            yield Bench(stack, client)
    finally:
        stack.down()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(state, ignore_errors=True)


def wait_for(predicate: Callable[[], Any], timeout_s: float = 600, every_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(every_s)
    raise TimeoutError(f"not within {timeout_s}s")


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), linear between closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * p / 100
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def summary(values: Sequence[float]) -> str:
    return (
        f"n={len(values)} p50={percentile(values, 50):.3f} p95={percentile(values, 95):.3f} "
        f"mean={statistics.fmean(values):.3f} max={max(values):.3f}"
    )


def write_report(
    name: str,
    markdown: str,
    figures: dict[str, Any] | None = None,
    *,
    measured: str | None = None,
) -> Path:
    """Write docs/benchmarks/<name>.md (one file per benchmark, replaced on every run), and
    the headline ``figures`` as <name>.json for the summary of `make bench`. ``measured``:
    when the figures were measured, if not now (a report written again from saved figures)."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    path = REPORTS / f"{name}.md"
    stamp = measured or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = f"{os.cpu_count()} CPUs"
    path.write_text(f"{markdown.rstrip()}\n\n_Measured {stamp} on {machine}._\n", encoding="utf-8")
    if figures is not None:
        merged = _read_json(REPORTS / f"{name}.json") | {"figures": figures, "measured": stamp}
        (REPORTS / f"{name}.json").write_text(json.dumps(merged, indent=1, default=str) + "\n")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}
