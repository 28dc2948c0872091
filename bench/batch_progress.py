"""How fast `GET /batches/{id}` answers for a 10,000-run batch that is being processed,
and how long cancelling that batch takes while its workers run.

python -m bench.batch_progress [--runs 10000] [--requests 300]
"""

from __future__ import annotations

import argparse
import time

from bench.harness import bench_stack, percentile, summary, wait_for, write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with bench_stack(batch_concurrency=4, latency_ms="0:0") as bench:
        documents = [
            {
                "id": f"p{i}",
                "text": f"SERVICES AGREEMENT {i}\nThe parties agree.\n1. TERM\n12 months.",
            }
            for i in range(args.runs)
        ]
        started = time.monotonic()
        batch_id = bench.client.submit_batch(documents)["batch_id"]
        submit_s = time.monotonic() - started
        print(f"POST /batches with {args.runs} documents: {submit_s:.2f}s")
        # Measure while the batch is being worked on, not on an idle table.
        wait_for(lambda: bench.client.batch(batch_id)["steps_done"] >= 300, timeout_s=300)
        latencies = []
        for _ in range(args.requests):
            t0 = time.perf_counter()
            status = bench.client.batch(batch_id)
            latencies.append((time.perf_counter() - t0) * 1000)
        query = "EXPLAIN (ANALYZE, FORMAT JSON) " + _progress_sql()
        plan = bench.sql(query, *[batch_id] * query.count("%s"))[0]["QUERY PLAN"]
        sql_ms = plan[0]["Execution Time"]
        started = time.monotonic()
        cancelled = bench.client.cancel_batch(batch_id)
        cancel_s = time.monotonic() - started
    print(f"GET /batches/{{id}} over HTTP (ms): {summary(latencies)}")
    print(
        f"the progress query itself: {sql_ms:.1f} ms; runs by status at the end: "
        f"{status['runs_by_status']}"
    )
    print(f"POST /batches/{{id}}/cancel: {cancel_s:.2f}s -> {cancelled['runs_by_status']}")
    write_report(
        "batch-progress",
        f"""# Batch progress for a {args.runs:,}-run batch

`python -m bench.batch_progress --runs {args.runs} --requests {args.requests}`: one batch of
{args.runs:,} documents submitted in one request, being processed by 4 batch workers while
`GET /batches/{{id}}` is called {args.requests} times in a row over HTTP (localhost).

| measure | value |
|---|---|
| `POST /batches` with {args.runs:,} documents (all runs created in one transaction) | {submit_s:.2f} s |
| `GET /batches/{{id}}` p50 | **{percentile(latencies, 50):.1f} ms** |
| `GET /batches/{{id}}` p95 | **{percentile(latencies, 95):.1f} ms** (target < 50 ms) |
| `GET /batches/{{id}}` p99 / max | {percentile(latencies, 99):.1f} / {max(latencies):.1f} ms |
| the progress query alone (EXPLAIN ANALYZE) | {sql_ms:.1f} ms |
| `POST /batches/{{id}}/cancel` while the workers run (every unfinished run stopped) | {cancel_s:.2f} s |
""",
        {
            "runs": args.runs,
            "p50_ms": percentile(latencies, 50),
            "p95_ms": percentile(latencies, 95),
            "p99_ms": percentile(latencies, 99),
            "cancel_s": cancel_s,
        },
    )


def _progress_sql() -> str:
    from docpipe.state.db import load_queries

    return (
        load_queries()["batch_progress"]
        .replace("%(batch_id)s", "%s")
        .replace("%(tenant_id)s", "'default'")
    )


if __name__ == "__main__":
    main()
