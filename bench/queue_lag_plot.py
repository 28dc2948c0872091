"""Queue lag and throughput over a batch run, as the /metrics endpoints report them.

A batch of --docs documents goes to the batch lane of a fresh local stack; --burst-at
seconds later a burst of interactive documents arrives. Every half second the script reads
beat's /metrics (queue lag and length per queue, batch runs still waiting in PostgreSQL)
and the workers' /metrics (steps and runs finished), then plots them into
docs/benchmarks/queue-lag.png with a summary in docs/benchmarks/queue-lag.md.

    python -m bench.queue_lag_plot [--docs 120] [--burst 16] [--burst-at 15]
"""

from __future__ import annotations

import argparse
import random
import socket
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import REPORTS, Bench, bench_stack, write_report
from docpipe_dev.samples import sample_contracts

QUEUES = ("llm_interactive", "llm_batch")


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Series:
    t: list[float] = field(default_factory=list)
    lag: dict[str, list[float]] = field(default_factory=lambda: {q: [] for q in QUEUES})
    length: dict[str, list[float]] = field(default_factory=lambda: {q: [] for q in QUEUES})
    backlog: list[float] = field(default_factory=list)
    steps_done: list[float] = field(default_factory=list)
    runs_done: list[float] = field(default_factory=list)


def read(url: str) -> Samples:
    text = httpx.get(url, timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: Samples, metric: str, /, **labels: str) -> float:
    return sum(
        v for (n, ls), v in samples.items() if n == metric and set(labels.items()) <= set(ls)
    )


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports (below the ephemeral range,
    from a random start, so that concurrent runs rarely pick the same ones)."""
    for _ in range(100):
        base = random.randrange(20000, 32000)
        try:
            for port in range(base, base + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


def sample(bench: Bench, series: Series, started: float) -> None:
    urls = bench.stack.metrics_urls()
    beat = read(urls["beat"])
    workers = [read(urls[name]) for name in ("worker-interactive", "worker-batch")]
    series.t.append(time.monotonic() - started)
    for queue in QUEUES:
        series.lag[queue].append(total(beat, "docpipe_queue_lag_seconds", queue_name=queue))
        series.length[queue].append(total(beat, "celery_queue_length", queue_name=queue))
    series.backlog.append(total(beat, "docpipe_batch_backlog_runs"))
    series.steps_done.append(
        sum(total(w, "celery_task_succeeded_total", name="docpipe.run_step") for w in workers)
    )
    series.runs_done.append(
        sum(total(w, "docpipe_runs_finished_total", status="done") for w in workers)
    )


def rate(t: list[float], counts: list[float], window_s: float = 3.0) -> list[float]:
    """Per-second increase over the trailing window (what Prometheus' rate() shows)."""
    out, j = [], 0
    for i in range(len(t)):
        while t[i] - t[j] > window_s:
            j += 1
        span = t[i] - t[j]
        out.append((counts[i] - counts[j]) / span if span > 0 else 0.0)
    return out


def plot(series: Series, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lag_ax, wait_ax, rate_ax) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for queue in QUEUES:
        lag_ax.plot(series.t, series.lag[queue], label=queue)
        wait_ax.plot(series.t, series.length[queue], label=f"{queue} (Redis)")
    wait_ax.plot(
        series.t, series.backlog, label="batch runs awaiting admission (PostgreSQL)", linestyle="--"
    )
    rate_ax.plot(series.t, rate(series.t, series.steps_done), label="steps finished / s")
    rate_ax.plot(series.t, rate(series.t, series.runs_done), label="documents finished / s")
    for ax in (lag_ax, wait_ax, rate_ax):
        ax.axvline(args.burst_at, color="grey", linewidth=0.8, linestyle=":")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    lag_ax.set_ylabel("queue lag (s)")
    lag_ax.set_title(
        f"{args.docs} batch documents, {args.burst} interactive ones at t={args.burst_at}s "
        "(dotted line)",
        fontsize=10,
    )
    wait_ax.set_ylabel("waiting")
    rate_ax.set_ylabel("throughput (1/s)")
    rate_ax.set_xlabel("seconds since the batch was submitted")
    fig.tight_layout()
    REPORTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(REPORTS / "queue-lag.png", dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=120)
    parser.add_argument("--burst", type=int, default=16)
    parser.add_argument("--burst-at", type=float, default=15.0)
    args = parser.parse_args()
    contracts = sample_contracts(args.docs + args.burst)
    series = Series()
    with bench_stack(
        env={"DOCPIPE_BATCH_ADMISSION_WINDOW": "12"},
        interactive_concurrency=2,
        batch_concurrency=4,
        latency_ms="100:300",
        metrics_port=free_port_run(4),  # pools, beat, API
    ) as bench:
        for url in bench.stack.metrics_urls().values():  # ours, not a neighbour's server
            assert "docpipe_" in httpx.get(url, timeout=5).text, f"{url} is not docpipe's"
        started = time.monotonic()
        bench.client.submit_batch(
            [{"id": f"b{i}", "text": c.text} for i, c in enumerate(contracts[: args.docs])]
        )
        burst_sent = False
        while True:
            sample(bench, series, started)
            if not burst_sent and series.t[-1] >= args.burst_at:
                for i, contract in enumerate(contracts[args.docs :]):
                    bench.client.put_document(f"i{i}", contract.text)
                    bench.client.extract(f"i{i}")
                burst_sent = True
            active = bench.scalar(
                "SELECT count(*) FROM pipeline_run WHERE status IN ('queued', 'running')"
            )
            if burst_sent and active == 0:
                break
            time.sleep(0.5)
        elapsed = series.t[-1]
    plot(series, args)
    peak = {q: max(series.lag[q]) for q in QUEUES}
    report = (
        "## Queue lag and throughput over a batch run\n\n"
        "![queue lag](queue-lag.png)\n\n"
        f"{args.docs} batch documents, then {args.burst} interactive ones at "
        f"t={args.burst_at:g}s; 4 batch and 2 interactive worker processes, provider latency "
        f"100-300 ms, admission window 12. Read from the /metrics endpoints every 0.5 s.\n\n"
        "| measure | value |\n|---|---|\n"
        f"| all runs done after | {elapsed:.1f} s |\n"
        f"| peak lag llm_batch | {peak['llm_batch']:.2f} s |\n"
        f"| peak lag llm_interactive | {peak['llm_interactive']:.2f} s |\n"
        f"| peak batch backlog in PostgreSQL | {max(series.backlog):.0f} runs |\n"
        f"| mean throughput | {series.steps_done[-1] / elapsed:.1f} steps/s |\n"
    )
    print(report)
    print(f"wrote {write_report('queue-lag', report)} and {REPORTS / 'queue-lag.png'}")


if __name__ == "__main__":
    main()
