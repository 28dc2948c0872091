"""What recording metrics costs on the hot path: time per call of the recording functions
a provider call, a step and a task go through, in memory (API, beat) and in prometheus_client's
multiprocess mode (a prefork worker's pool process, writing to mmapped files).

    python -m bench.metrics_overhead [--calls 200000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal


def per_call_us(fn: Callable[[], None], calls: int) -> float:
    fn()  # creates the label children once, as the first real call does
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def measure(calls: int) -> dict[str, float]:
    from docpipe.observability import metrics

    m = metrics.metrics()

    def provider_call() -> None:
        metrics.observe_provider_call(
            pipeline="document_extract:v1",
            tenant="acme",
            lane="batch",
            model="gpt-4o-mini",
            outcome="ok",
            http_status=200,
            error_kind=None,
            latency_s=0.42,
            cost_usd=Decimal("0.000123"),
        )

    def step() -> None:
        metrics.observe_step(
            "document_extract:v1", "extract_fields", "batch", "completed", "running", 3.2
        )

    def task() -> None:  # what the task_prerun/postrun/success handlers record
        labels = ("docpipe.run_step", "batch@host", "llm_batch")
        m.task_started.labels(*labels).inc()
        m.worker_tasks_active.labels("batch@host").inc()
        m.task_queue_wait.labels(*labels).observe(0.8)
        m.worker_tasks_active.labels("batch@host").dec()
        m.task_runtime.labels(*labels).observe(3.2)
        m.task_succeeded.labels(*labels).inc()

    return {
        "provider call (2 counters, 1 histogram)": per_call_us(provider_call, calls),
        "step (1 histogram, 1 counter)": per_call_us(step, calls),
        "task (3 counters/gauges, 2 histograms, 1 dec)": per_call_us(task, calls),
        "limiter wait (1 histogram)": per_call_us(
            lambda: metrics.observe_limiter_wait("batch", 0.01), calls
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--child", choices=["memory", "multiprocess"])
    args = parser.parse_args()
    if args.child:
        if args.child == "multiprocess":
            from docpipe.observability import metrics

            metrics.use_multiprocess_dir()
        for name, us in measure(args.calls).items():
            print(f"| {args.child} | {name} | {us:.2f} µs |")
        return
    print("| mode | recorded per | time per call |\n|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        for mode in ("memory", "multiprocess"):
            env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
            if mode == "multiprocess":
                env["PROMETHEUS_MULTIPROC_DIR"] = directory
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.metrics_overhead",
                    "--child",
                    mode,
                    "--calls",
                    str(args.calls),
                ],
                env=env,
                check=True,
            )


if __name__ == "__main__":
    main()
