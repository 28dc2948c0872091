"""`make bench`: every benchmark in sequence, then one summary table.

Each benchmark runs as its own process (a fresh stack each), writes
docs/benchmarks/<name>.md (+ .json with its headline figures, + PNGs); this script then
prints the summary and writes docs/benchmarks/README.md linking every report.

    python -m bench.suite                 # full size (35-90 minutes on 2 cores)
    BENCH_QUICK=1 python -m bench.suite   # smoke run at small sizes (a few minutes)
    BENCH_ONLY=throughput,crash-cost python -m bench.suite   # a subset
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.harness import REPORTS, ROOT

Figures = dict[str, Any]


@dataclass(frozen=True)
class Benchmark:
    name: str  # report name: docs/benchmarks/<name>.md and .json
    module: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    # (what, value) rows for the summary table, from the report's figures.
    headline: Callable[[Figures], list[tuple[str, str]]]


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _throughput(f: Figures) -> list[tuple[str, str]]:
    rows = []
    for latency in ("0s", "0.2s"):
        if (rate := f.get(f"docpipe_docs_per_s@{latency}")) is None:
            continue
        ratios = ", ".join(
            f"{_x(f[k])} {k.split('_vs_')[1].split('@')[0]}"
            for k in sorted(f)
            if k.startswith("ratio_vs_") and k.endswith(f"@{latency}")
        )
        rows.append(
            (
                f"throughput at {latency.removesuffix('s')} s per call, concurrency "
                f"{f['concurrency']}",
                f"{rate:.1f} documents/s; docpipe / peer: {ratios}",
            )
        )
        if (share := f.get(f"docpipe_share_of_ideal@{latency}")) is not None:
            rows.append(
                (
                    f"share of ideal at {latency.removesuffix('s')} s per call",
                    f"{share:.1%} (ideal: C / (latency x {f['mean_rounds']:.2f} round trips))",
                )
            )
    overhead = {
        k.removesuffix("_overhead_wall_ms_per_step"): v
        for k, v in f.items()
        if k.endswith("_overhead_wall_ms_per_step")
    }
    if "docpipe" in overhead:
        cpu = f["docpipe_overhead_cpu_ms_per_step"]
        peers = ", ".join(f"{k} {v:.1f}" for k, v in overhead.items() if k != "docpipe")
        rows.append(
            (
                "orchestration overhead per step (0 s provider, concurrency 1)",
                f"{overhead['docpipe']:.1f} ms wall, {cpu:.1f} ms CPU (peers' wall: {peers})",
            )
        )
    return rows


def _provider_batch_waits(f: Figures) -> list[tuple[str, str]]:
    """The provider-batch report's values and waits (absent from a report before them)."""
    if "same_values" not in f:
        return []
    same, waits = f["same_values"], f["while_parked"]
    return [
        (
            "provider-batch lane: documents whose values equal real time's",
            f"{same['documents_equal']} of {same['documents']}",
        ),
        (
            "an interactive run while the lane's calls are parked / at rest, median; the "
            "longest a step stays running while its call waits",
            f"{waits['interactive_median_s']:.2f} / {f['interactive_at_rest_median_s']:.2f} s "
            f"({f['interactive_ratio']:.2f}x); {waits['longest_held_s'] * 1000:.0f} ms",
        ),
    ]


def _time_budget(f: Figures) -> list[tuple[str, str]]:
    parts = f["parts_ms"]
    return [
        (
            f"a document's worker time at 0.2 s per call: {' / '.join(parts)}",
            " / ".join(f"{ms:.0f}" for ms in parts.values())
            + f" ms ({f['share_of_ideal']:.1%} of the slot is ideal)",
        ),
        (
            "per document at 0.2 s per call: PostgreSQL transactions / Redis script calls / "
            "Redis commands in all",
            " / ".join(
                f"{f['per_document'][k]:.0f}"
                for k in ("postgres_transactions", "redis_script_calls", "redis_commands")
            ),
        ),
    ]


def _admission(f: Figures) -> list[tuple[str, str]]:
    backlogs = sorted(int(k.removeprefix("p50_ms@")) for k in f)
    return [
        (
            f"admitting one batch run behind {' / '.join(f'{b:,}' for b in backlogs)} "
            "waiting runs, p50",
            " / ".join(f"{f[f'p50_ms@{b}']:.2f}" for b in backlogs) + " ms",
        )
    ]


def _crash(f: Figures) -> list[tuple[str, str]]:
    return [
        (
            f"crash mid step 2: calls paid twice, {name}",
            f"{s['wasted_calls']:.1f} of {s['clean_calls']:.0f}; resumes after {s['resume_s']:.1f} s",
        )
        for name, s in f.items()
    ]


def _peak(figures: dict[str, Any], case: str, *, files: bool) -> float:
    """The highest peak RSS of api-memory's rows whose case names ``case``, among its file
    uploads (``files``) or its batch bodies."""
    return max(
        r["peak_mib"]
        for r in figures["rows"]
        if case in r["case"] and ("PDF" in r["case"]) == files
    )


def _hostile(f: Figures) -> list[tuple[str, str]]:
    rows = []
    for key, where in (("corpus", "prefork pool process"), ("corpus_threads", "threads worker")):
        if (corpus := f.get(key)) is None:
            continue
        files = corpus["files"]
        rows.append(
            (
                f"hostile corpus in a {where}: files ending as documented / largest peak RSS "
                "/ slowest",
                f"{sum(r['ok'] for r in files)} of {len(files)} / "
                f"{corpus['largest_pool_peak_mib']:.0f} MiB (bound {corpus['bound_mib']:g}) / "
                f"{corpus['slowest_s']:.0f} s",
            )
        )
    if (api := f.get("api")) is not None:
        load = api["under_load"]
        rows.append(
            (
                "API under hostile requests: probe p99 / failed probes / API peak RSS",
                f"{load['p99_ms']:.0f} ms / {load['failures']} / {api['api_peak_rss_mib']:.0f} MiB",
            )
        )
    return rows


BENCHMARKS = [
    Benchmark(
        "throughput",
        "bench.throughput",
        ("--docs", "1000", "--concurrency", "8", "--overhead-docs", "100"),
        ("--docs", "100", "--concurrency", "8", "--overhead-docs", "20"),
        _throughput,
    ),
    Benchmark(
        "time-budget",
        "bench.time_budget",
        ("--docs", "300"),
        ("--docs", "40"),
        _time_budget,
    ),
    Benchmark(
        "crash-cost",
        "bench.crash_cost",
        ("--rounds", "3", "--visibility-timeout-s", "30"),
        ("--rounds", "1", "--visibility-timeout-s", "10"),
        _crash,
    ),
    Benchmark(
        "interactive-latency",
        "bench.interactive_latency",
        ("--docs", "40", "--batch", "1000"),
        ("--docs", "8", "--batch", "100"),
        lambda f: [
            (
                "interactive latency under a batch, p50 / p95 ratio",
                f"{f['p50_ratio']:.2f} / {f['p95_ratio']:.2f}",
            )
        ],
    ),
    Benchmark(
        "rate-limit",
        "bench.rate_limit",
        (),
        ("--seconds", "50", "--burst-at", "35", "--squeeze-s", "10", "--docs", "200"),
        lambda f: [
            (
                "provider-limit utilisation / 429 share",
                f"{f['utilisation']:.1%} / {f['share_429']:.2%}",
            )
        ],
    ),
    Benchmark(
        "rate-limit-tpm",
        "bench.rate_limit",
        ("--case", "tpm"),
        ("--case", "tpm", "--seconds", "50", "--docs", "200"),
        lambda f: [
            (
                "tokens-per-minute limit: utilisation / 429 share",
                f"{f['utilisation']:.1%} / {f['share_429']:.2%}",
            )
        ],
    ),
    Benchmark(
        "rate-limit-two-models",
        "bench.rate_limit",
        ("--case", "two-models"),
        ("--case", "two-models", "--seconds", "50", "--docs", "200"),
        lambda f: [
            (
                "two models' own limits: utilisation each / 429 share",
                " / ".join(f"{v['utilisation']:.1%}" for v in f["models"].values())
                + f" / {f['share_429']:.2%}",
            )
        ],
    ),
    Benchmark(
        "batch-progress",
        "bench.batch_progress",
        ("--runs", "10000"),
        ("--runs", "1000", "--requests", "100"),
        lambda f: [
            (
                f"GET /batches/{{id}} at {f['runs']:,} runs, p50 / p95",
                f"{f['p50_ms']:.1f} / {f['p95_ms']:.1f} ms",
            ),
            ("cancel of that batch while its workers run", f"{f['cancel_s']:.2f} s"),
        ],
    ),
    Benchmark(
        "admission-cost",
        "bench.admission_cost",
        (),
        ("--backlogs", "100,1000", "--rounds", "10"),
        _admission,
    ),
    Benchmark(
        "scale",
        "bench.scale",
        ("--sizes", "100000,1000000"),
        ("--sizes", "30000,60000", "--repeat", "3"),
        lambda f: [
            (
                f"at {f['sizes'][-1]:,} runs: admission with free slots / a metrics scrape"
                " (targets: 20 / 50 ms)",
                f"{f['admission_free_slots_ms']:.1f} / {f['metrics_scrape_ms']:.1f} ms",
            ),
            (
                f"periodic and list queries at {f['sizes'][-1]:,} runs over {f['sizes'][0]:,},"
                " worst time / work (target: 2x)",
                f"{f['periodic_list_worst_time_ratio']:.2f}x / "
                f"{f['periodic_list_worst_work_ratio']:.2f}x",
            ),
            (
                "bytes per run of history, before / now; within the default retention",
                f"{f['bytes_per_run_before']:,.0f} / {f['bytes_per_run_small']:,.0f};"
                f" {f['bytes_per_run_retained_before']:,.0f} / {f['bytes_per_run_retained']:,.0f}",
            ),
            (
                "retention: runs / documents / rows of every table removed per second",
                f"{f['runs_pruned_per_s']:,.0f} / {f['documents_pruned_per_s']:,.0f} /"
                f" {f['rows_pruned_per_s']:,.0f}",
            ),
        ],
    ),
    Benchmark(
        "live-migration",
        "bench.live_migration",
        ("--runs", "1000000"),
        ("--runs", "30000"),
        lambda f: [
            (
                f"partitioning a live call log of {f['calls_before']:,} calls",
                f"{f['migrate_s']:.1f} s; longest write / read meanwhile"
                f" {f['longest_write_ms']:.0f} / {f['longest_read_ms']:.0f} ms;"
                f" {f['missing']} lost, {f['errors']} errors",
            )
        ],
    ),
    Benchmark(
        "api-load",
        "bench.api_load",
        ("--rps", "200", "--seconds", "60"),
        ("--rps", "200", "--seconds", "10", "--runs", "2000", "--sweep", "100,300"),
        lambda f: [
            (
                f"GET /runs/{{id}} at {f['rps']:g} requests/s during a batch, p50 / p99",
                f"{f['p50_ms']:.1f} / {f['p99_ms']:.1f} ms ({f['errors']} errors); one API "
                f"process holds {f.get('holds_rps_under_50ms_p99', 0):g}/s under 50 ms p99",
            )
        ],
    ),
    Benchmark(
        "footprint",
        "bench.footprint",
        ("--queued", "200"),
        ("--queued", "50", "--docs", "16"),
        lambda f: [
            (
                "broker bytes per queued step (Redis MEMORY USAGE)",
                f"{f['docpipe_broker_bytes_per_step']:.0f} B "
                f"(raw message {f['docpipe_raw_message_bytes']:.0f} B)",
            ),
            (
                "RSS per worker process (mean) / PSS of a 4-process pool",
                f"{f['docpipe_worker_rss_mb']:.0f} MB / {f['docpipe_worker_pss_total_mb']:.0f} MB",
            ),
        ],
    ),
    Benchmark(
        "in-flight",
        "bench.in_flight",
        (),
        ("--docs", "60", "--prefork-docs", "16", "--latency-s", "0.5", "--long-docs", "0"),
        lambda f: [
            (
                f"steps in flight at {latency}: documents/s (share of ideal), PSS per step in "
                "flight, " + " / ".join(k.split("@")[0] for k in f if k.endswith(f"@{latency}")),
                " / ".join(
                    f"{v['docs_per_s']:.2f} ({v['share_of_ideal']:.0%}), "
                    f"{v['pss_mb_per_step']:.2f} MB"
                    for k, v in f.items()
                    if k.endswith(f"@{latency}")
                ),
            )
            for latency in sorted({k.split("@")[1] for k in f}, key=lambda x: float(x[:-1]))
        ],
    ),
    Benchmark(
        "api-memory",
        "bench.api_memory",
        (),
        (),
        lambda f: [
            (
                "API peak RSS: batch over the body cap (chunked) / two stored at the cap",
                f"{_peak(f, 'chunked', files=False):.0f} / "
                f"{_peak(f, 'at once', files=False):.0f} MiB",
            ),
            (
                "API peak RSS: a PDF at the 50 MB limit stored / two at once",
                f"{_peak(f, 'limit: stored', files=True):.0f} / "
                f"{_peak(f, 'at once', files=True):.0f} MiB",
            ),
        ],
    ),
    Benchmark(
        "lists",
        "bench.lists",
        ("--runs", "1000000"),
        ("--runs", "20000", "--rounds", "20"),
        lambda f: [
            (
                f"finding past work at {f['runs']:,} runs: slowest list page / home page, p95",
                f"{max(r['p95_ms'] for r in f['rows'] if not r['query'].startswith('home')):.1f}"
                f" / {next(r['p95_ms'] for r in f['rows'] if r['query'].startswith('home')):.1f}"
                " ms",
            )
        ],
    ),
    Benchmark(
        "results-export",
        "bench.results_export",
        ("--runs", "10000"),
        ("--runs", "1000", "--templates", "6", "--rounds", "1"),
        lambda f: [
            (
                f"results export of {f['runs']:,} runs, {r['format']}: runs/s, MB/s, API peak RSS",
                f"{r['runs_per_s']:,.0f} runs/s, {r['mb_per_s']:.1f} MB/s, "
                f"{r['peak_rss_mib']:.0f} MiB ({r.get('runs_per_api_cpu_s') or 0:,.0f} runs "
                "per API CPU second)",
            )
            for r in f["rows"]
            if r["runs"] == f["runs"]
        ],
    ),
    Benchmark(
        "document-formats",
        "bench.document_formats",
        ("--documents", "200", "--rounds", "3"),
        ("--documents", "20", "--rounds", "1"),
        lambda f: [
            (
                "pages/s per worker process: " + " / ".join(f["speeds"]),
                " / ".join(f"{v['pages_per_s']:g}" for v in f["speeds"].values()),
            ),
            (
                f"{f['batch']['documents']} mixed documents through the batch lane",
                f"{f['batch']['seconds']:.0f} s ({f['batch']['ocr_pages']} pages by OCR)",
            ),
            (
                "SIGKILL during OCR: pages read twice per kill",
                ", ".join(str(c["pages_redone"]) for c in f["crashes"]),
            ),
        ],
    ),
    Benchmark(
        "recovery",
        "bench.recovery",
        ("--rounds", "5"),
        ("--rounds", "1"),
        lambda f: [
            (
                "a lost worker's step running again (median): pool process SIGKILLed / worker "
                "SIGKILLed, a replica up / only worker, restarted / partitioned",
                " / ".join(
                    f"{f['median_s'][case]:.1f}"
                    for case in (
                        "pool process",
                        "worker, a replica up",
                        "only worker, restarted",
                        "partitioned",
                    )
                    if case in f["median_s"]
                )
                + f" s (partition bound {f['partition_bound_s']:g} s; late writes refused "
                f"{f['partition_refused']}x, late calls {f['partition_late_calls']})",
            ),
            *(
                [
                    (
                        f"a threads process holding {f['threads_held_steps']} steps SIGKILLed: "
                        "the last of them running again / median",
                        f"{f['threads_all_again_s']:.2f} / {f['threads_median_again_s']:.2f} s "
                        f"({f['threads_answered_twice']} calls answered twice)",
                    )
                ]
                if "threads_all_again_s" in f
                else []
            ),
        ],
    ),
    Benchmark("hostile", "bench.hostile", (), (), lambda f: _hostile(f)),
    Benchmark(
        "recovery-in-flight",
        "bench.recovery",
        ("--only-in-flight", "--in-flight", "200", "--in-flight-rounds", "3"),
        ("--only-in-flight", "--in-flight", "40", "--in-flight-rounds", "1"),
        lambda f: [
            (
                f"a threads process holding {f['threads_held_steps']} steps SIGKILLed: the last "
                "of them running again / median",
                f"{f['threads_all_again_s']:.2f} / {f['threads_median_again_s']:.2f} s "
                f"({f['threads_answered_twice']} calls answered twice)",
            )
        ],
    ),
    Benchmark(
        "fairness",
        "bench.fairness",
        (),
        ("--big", "60", "--small", "5"),
        lambda f: [("fairness: small tenant's batch behind a big one / alone", _x(f["ratio"]))],
    ),
    Benchmark(
        "provider-batches",
        "bench.provider_batches",
        ("--docs", "200"),
        ("--docs", "20", "--completion-s", "5", "--parked-docs", "10", "--interactive", "3"),
        lambda f: [
            (
                f"{f['docs']} documents, real time / provider-batch lane ({f['completion_s']:g} s "
                "window simulated): cost per 1,000 documents, time to done",
                f"${f['realtime']['cost_per_1000_docs_usd']:.4f} / "
                f"${f['provider_batch']['cost_per_1000_docs_usd']:.4f} "
                f"({f['cost_ratio']:.3f}x); {f['realtime']['time_to_done_s']:.0f} / "
                f"{f['provider_batch']['time_to_done_s']:.0f} s",
            ),
            (
                "per provider call, real time / provider batch: PostgreSQL transactions, rows "
                "written, Redis commands",
                " / ".join(
                    f"{f['realtime']['per_call'][k]:.1f} vs {f['provider_batch']['per_call'][k]:.1f}"
                    for k in ("postgres_transactions", "postgres_rows_written", "redis_commands")
                ),
            ),
            *_provider_batch_waits(f),
        ],
    ),
]


def run(bench: Benchmark, quick: bool) -> tuple[bool, float]:
    argv = [sys.executable, "-m", bench.module, *(bench.quick if quick else bench.full)]
    print(f"\n=== {bench.name}: {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode == 0
    return ok, time.monotonic() - started


def figures_of(name: str) -> tuple[Figures | None, str]:
    try:
        data = json.loads((REPORTS / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None, ""
    return data.get("figures"), str(data.get("measured", ""))


def main() -> None:
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    only = {n for n in os.environ.get("BENCH_ONLY", "").split(",") if n}
    outcome: dict[str, tuple[bool, float]] = {}
    for bench in BENCHMARKS:
        if not only or bench.name in only:
            outcome[bench.name] = run(bench, quick)
    rows: list[tuple[str, str, str, str]] = []
    for bench in BENCHMARKS:
        figures, measured = figures_of(bench.name)
        link = f"[{bench.name}]({bench.name}.md)"
        if bench.name in outcome and not outcome[bench.name][0]:
            rows.append((bench.name, "FAILED (see the output above)", link, ""))
            continue
        if figures is None:
            rows.append((bench.name, "not measured yet", link, ""))
            continue
        try:
            lines = bench.headline(figures)
        except (KeyError, TypeError, ValueError) as exc:
            lines = [(bench.name, f"figures incomplete ({exc!r})")]
        for what, value in lines:
            rows.append((what, value, link, measured))
    table = "\n".join(
        ["| figure | measured | report | when |", "|---|---|---|---|"]
        + [f"| {what} | {value} | {link} | {when} |" for what, value, link, when in rows]
    )
    mode = "BENCH_QUICK=1 (small sizes: a smoke run, not the figures)" if quick else "full size"
    durations = ", ".join(f"{n} {s / 60:.1f} min" for n, (_, s) in outcome.items())
    if only and durations:
        durations = f'only {durations}; the "when" column dates every row'
    readme = f"""# Benchmarks

`make bench` runs every benchmark below in sequence on a fresh local stack each
(PostgreSQL, Redis and the fake provider as local processes) and rewrites this page;
`BENCH_QUICK=1 make bench` is a smoke run at small sizes, `BENCH_ONLY=throughput,...` runs
a subset. Each report says exactly what was run and how to rerun it alone. Last run:
{mode}; {durations or "no benchmark rerun, the table only rebuilt"}.

{table}

Figures are measured, not asserted: they vary with the machine and with whatever else
runs on it. Ratios are measured inside one run (docpipe and its peers on the same
servers, one after the other), so they move less than absolute rates.

On 2 vCPUs the same benchmark run minutes apart can differ by 1-3 points of the share of
ideal at 0.2 s per call, more than most single changes to the hot path are worth. To
judge a change, interleave: run `python -m bench.time_budget` on the old code, then on the
new, at least three pairs in a row, and compare the pairs; a before and an after taken at
different times of a session prove nothing at that scale.

Plots: [throughput](throughput.png), [rate limit](rate-limit.png), [queue lag](queue-lag.png)
(`make bench-queue-lag`); where a worker's CPU goes: [flame graph](profile.svg)
(`make bench-profile`, py-spy over a batch worker at 0 s per call, sampling the thread
that holds the GIL).
"""
    (REPORTS / "README.md").write_text(readme, encoding="utf-8")
    print("\n" + table)
    print(f"\nwrote {REPORTS / 'README.md'}")
    if not all(ok for ok, _ in outcome.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
