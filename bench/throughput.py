"""Throughput and orchestration overhead, docpipe side by side with its peers.

One fresh stack (PostgreSQL, Redis, the fake provider) serves every system in turn:

- docpipe: documents in through ``POST /batches``, C batch worker processes;
- (a) plain Celery, the whole pipeline in one task, C prefork processes;
- (b) plain Celery, one task per step chained, no state, C prefork processes;
- (c) DBOS, a queue with worker_concurrency C in one process (DBOS' default queue polling
  of 1 s); tuned variants: polled every 0.05 s, and that in 2 processes of C/2 each (DBOS
  runs a process' workflows as threads, so one process uses one core at most).

Each runs the same documents through ``document_extract:v1`` with the same calls (per-step
parallelism 4 everywhere) to the same fake provider, at 0 s and at 0.2 s per call.
docpipe's worker pools and beat are stopped while the peers run.

Ideal: a document needs ``rounds = 1 + ceil(sections / 4) + 1`` sequential provider round
trips (sections; fields, 4 at a time; summary), so C workers with nothing but waiting on
the provider finish ``C / (latency x mean rounds)`` documents per second.

Overhead per step: the same systems at concurrency 1 with a 0 s provider, against the
pipeline run in a plain loop in this process (no queue, no state): wall ms per step above
that floor, and CPU ms per step of the orchestrator's processes and the stores it uses.

    python -m bench.throughput [--docs 1000] [--concurrency 8] [--overhead-docs 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.harness import REPORTS, bench_stack, write_report
from bench.systems import (
    Document,
    RunResult,
    Servers,
    System,
    bare_system,
    celery_system,
    dbos_system,
    docpipe_system,
    documents,
    measure,
    rounds,
)

LATENCIES = (0.0, 0.2)
PEERS: dict[str, Callable[[Servers], System]] = {
    "celery-whole": lambda s: celery_system(s, "whole"),
    "celery-steps": lambda s: celery_system(s, "steps"),
    "dbos": lambda s: dbos_system(s),
    "dbos-poll0.05": lambda s: dbos_system(s, polling_s=0.05),
    "dbos-poll0.05-x2": lambda s: dbos_system(s, polling_s=0.05, processes_n=2),
}
DOCPIPE_PROCESSES = ("worker-batch", "worker-interactive", "beat")


def run_all(
    servers: Servers,
    docs: Sequence[Document],
    *,
    concurrency: int,
    latencies: Sequence[float],
    peers: Sequence[str],
    bare: bool = False,
) -> list[RunResult]:
    """docpipe first (its processes are then stopped), then each peer, at each latency."""
    results = []
    warm_up = documents(2 * concurrency, "warm")

    def one(system: System, latency: float, tag: str) -> None:
        measure(
            servers,
            system,
            [(f"{tag}-{i}", t) for i, t in warm_up],
            concurrency=concurrency,
            latency_s=latency,
        )
        result = measure(
            servers,
            system,
            [(f"{tag}-{i}", t) for i, t in docs],
            concurrency=concurrency,
            latency_s=latency,
        )
        print(
            f"  {system.name:14s} latency {latency:.1f}s: {result.docs_per_s:7.2f} docs/s, "
            f"{1000 * result.orchestration_cpu_s / result.steps:5.1f} CPU ms/step, "
            f"{result.calls} provider calls",
            flush=True,
        )
        results.append(result)

    docpipe = docpipe_system(servers)
    for latency in latencies:
        one(docpipe, latency, f"docpipe-{latency}")
    for name in DOCPIPE_PROCESSES:
        servers.bench.stack.halt(name, kill=False)
    chosen = [PEERS[name](servers) for name in peers]
    if bare:
        chosen.append(bare_system(servers))
    for system in chosen:
        system.start(concurrency)
        try:
            system.reset()
            for latency in latencies:
                one(system, latency, f"{system.name}-{latency}")
        finally:
            system.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--overhead-docs", type=int, default=100)
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--latencies", default=",".join(str(x) for x in LATENCIES))
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    latencies = [float(x) for x in args.latencies.split(",")]
    docs = documents(args.docs)
    mean_rounds = statistics.fmean(rounds(text, 4) for _, text in docs)
    c = args.concurrency

    print(f"throughput: {args.docs} documents, concurrency {c}")
    with bench_stack(batch_concurrency=c, interactive_concurrency=1, latency_ms="0:0") as bench:
        main_runs = run_all(Servers(bench), docs, concurrency=c, latencies=latencies, peers=peers)
    print(f"overhead: {args.overhead_docs} documents, concurrency 1, provider at 0 s")
    with bench_stack(batch_concurrency=1, interactive_concurrency=1, latency_ms="0:0") as bench:
        one_process = [p for p in peers if not p.endswith("-x2")]  # concurrency 1: 1 process
        overhead_runs = run_all(
            Servers(bench),
            documents(args.overhead_docs, "o"),
            concurrency=1,
            latencies=[0.0],
            peers=one_process,
            bare=True,
        )

    figures = summarise(main_runs, overhead_runs, c, mean_rounds)
    (REPORTS / "throughput.json").write_text(
        json.dumps(
            {
                "figures": figures,
                "runs": [r.as_dict() for r in main_runs],
                "overhead_runs": [r.as_dict() for r in overhead_runs],
            },
            indent=1,
        )
    )
    plot(main_runs, c, mean_rounds)
    report = markdown(main_runs, overhead_runs, figures, args, mean_rounds)
    print(report)
    write_report("throughput", report, figures)


def _by(runs: Sequence[RunResult], system: str, latency: float) -> RunResult | None:
    return next((r for r in runs if r.system == system and r.latency_s == latency), None)


def ideal_docs_per_s(concurrency: int, latency_s: float, mean_rounds: float) -> float:
    return concurrency / (latency_s * mean_rounds)


def summarise(
    runs: Sequence[RunResult], overhead: Sequence[RunResult], c: int, mean_rounds: float
) -> dict[str, Any]:
    """The headline figures (also what the suite's summary table shows)."""
    figures: dict[str, Any] = {"concurrency": c, "mean_rounds": mean_rounds}
    for latency in sorted({r.latency_s for r in runs}):
        mine = _by(runs, "docpipe", latency)
        if mine is None:
            continue
        key = f"{latency:g}s"
        figures[f"docpipe_docs_per_s@{key}"] = mine.docs_per_s
        if latency > 0:
            figures[f"docpipe_share_of_ideal@{key}"] = mine.docs_per_s / ideal_docs_per_s(
                c, latency, mean_rounds
            )
        for r in runs:
            if r.latency_s == latency and r.system != "docpipe":
                figures[f"ratio_vs_{r.system}@{key}"] = mine.docs_per_s / r.docs_per_s
    floor = _by(overhead, "bare", 0.0)
    for r in overhead:
        if floor is not None and r.system != "bare":
            wall = (r.elapsed_s - floor.elapsed_s) / r.steps * 1000
            figures[f"{r.system}_overhead_wall_ms_per_step"] = wall
            figures[f"{r.system}_overhead_cpu_ms_per_step"] = (
                1000 * (r.orchestration_cpu_s - floor.orchestration_cpu_s) / r.steps
            )
    return figures


def markdown(
    runs: Sequence[RunResult],
    overhead: Sequence[RunResult],
    figures: dict[str, Any],
    args: argparse.Namespace,
    mean_rounds: float,
) -> str:
    c = args.concurrency
    labels = {
        "docpipe": "**docpipe**",
        "celery-whole": "(a) Celery, pipeline in one task",
        "celery-steps": "(b) Celery, one task per step, no state",
        "dbos": "(c) DBOS, queue (default polling 1 s)",
        "dbos-poll0.05": "(c') DBOS, queue polled every 0.05 s",
        "dbos-poll0.05-x2": "(c'') DBOS, polled every 0.05 s, 2 processes x C/2",
        "bare": "no orchestrator",
    }
    lines = [
        f"# Throughput: docpipe and its peers, {args.docs:,} documents, concurrency {c}",
        "",
        f"`python -m bench.throughput --docs {args.docs} --concurrency {c}`: the same "
        "`document_extract:v1` calls (1 + one per section, 4 at a time + 1; on average "
        f"{runs[0].calls / runs[0].docs:.1f} per document) to the same fake provider, one "
        "system at a time on one machine (PostgreSQL, Redis and the provider shared). "
        "Documents/s from submission to the last document's end. CPU ms per step: the "
        "orchestrator's processes plus the stores it uses (PostgreSQL and/or Redis) and the "
        "submitting client, the provider excluded.",
        "",
    ]
    for latency in sorted({r.latency_s for r in runs}):
        ideal = ideal_docs_per_s(c, latency, mean_rounds) if latency > 0 else None
        lines += [f"## Provider latency {latency:g} s", ""]
        head = "| system | documents/s | docpipe / system | CPU ms per step | provider calls |"
        lines += [
            head + (" share of ideal |" if ideal else ""),
            "|---|---|---|---|---|" + ("---|" if ideal else ""),
        ]
        mine = _by(runs, "docpipe", latency)
        for r in (r for r in runs if r.latency_s == latency):
            ratio = f"**{mine.docs_per_s / r.docs_per_s:.2f}**" if mine and r is not mine else ""
            row = (
                f"| {labels.get(r.system, r.system)} | {r.docs_per_s:.2f} | {ratio} | "
                f"{1000 * r.orchestration_cpu_s / r.steps:.1f} | {r.calls} |"
            )
            if ideal:
                row += f" {r.docs_per_s / ideal:.1%} |"
            lines.append(row)
        if ideal:
            lines += [
                "",
                f"Ideal at {latency:g} s: {c} workers x 1 document / ({latency:g} s x "
                f"{mean_rounds:.2f} round trips) = **{ideal:.2f} documents/s** (the round trips "
                "a document needs at best: sections, ceil(sections / 4) rounds of fields, "
                f"summary; the literal C / (3 steps x latency) = {c / (3 * latency):.2f} would "
                "count the fields step as one round trip, which no system can do).",
            ]
        lines.append("")
    lines += [
        "## Orchestration overhead per step (concurrency 1, provider at 0 s)",
        "",
        f"{args.overhead_docs} documents one at a time; the floor is the same pipeline in a "
        "plain loop in one process (no queue, no state, same client).",
        "",
        "| system | wall ms per step | above the floor | CPU ms per step | above the floor |",
        "|---|---|---|---|---|",
    ]
    floor = _by(overhead, "bare", 0.0)
    for r in overhead:
        wall = r.elapsed_s / r.steps * 1000
        cpu = 1000 * r.orchestration_cpu_s / r.steps
        if floor is None:
            continue
        floor_wall = floor.elapsed_s / floor.steps * 1000
        floor_cpu = 1000 * floor.orchestration_cpu_s / floor.steps
        lines.append(
            f"| {labels.get(r.system, r.system)} | {wall:.1f} | {wall - floor_wall:+.1f} "
            f"| {cpu:.1f} | {cpu - floor_cpu:+.1f} |"
        )
    lines += [
        "",
        "CPU per component (ms per step), main runs:",
        "",
        "| system | latency | workers | PostgreSQL | Redis | submit | provider |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        ms = {k: 1000 * v / r.steps for k, v in r.cpu_s.items()}
        lines.append(
            f"| {r.system} | {r.latency_s:g} s | {ms['workers']:.1f} | "
            f"{ms['postgres']:.1f} | {ms['redis']:.1f} | {ms['submit']:.1f} | "
            f"{ms['provider']:.1f} |"
        )
    lines += ["", "![documents per second by system](throughput.png)"]
    return "\n".join(lines)


def plot(runs: Sequence[RunResult], c: int, mean_rounds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latencies = sorted({r.latency_s for r in runs})
    fig, axes = plt.subplots(1, len(latencies), figsize=(5 * len(latencies), 4), squeeze=False)
    for ax, latency in zip(axes[0], latencies, strict=True):
        mine = [r for r in runs if r.latency_s == latency]
        colours = ["tab:blue" if r.system == "docpipe" else "tab:grey" for r in mine]
        ax.barh([r.system for r in mine], [r.docs_per_s for r in mine], color=colours)
        if latency > 0:
            ideal = ideal_docs_per_s(c, latency, mean_rounds)
            ax.axvline(ideal, color="tab:green", linestyle="--", label=f"ideal {ideal:.1f}/s")
            ax.legend(loc="lower right", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"provider latency {latency:g} s, concurrency {c}", fontsize=10)
        ax.set_xlabel("documents per second")
    fig.tight_layout()
    REPORTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(REPORTS / "throughput.png", dpi=100)


if __name__ == "__main__":
    main()
