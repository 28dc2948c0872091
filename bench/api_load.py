"""``GET /runs/{id}`` latency under a steady 200 requests/s while a batch is processed.

An open-loop load generator (asyncio + httpx in this process) sends --rps requests per
second for --seconds, each for a random run among --runs existing ones (finished, running
and waiting), while the batch workers process a batch at 0.2 s per provider call. A
request's latency counts from the moment it was due, not from when it was sent, so a
stalled server cannot hide its queue (no coordinated omission).

    python -m bench.api_load [--rps 200] [--seconds 60] [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import httpx

from bench.harness import bench_stack, percentile, summary, wait_for, write_report
from bench.systems import documents


async def open_loop(
    url: str, api_key: str | None, run_ids: list[str], rps: float, seconds: float
) -> tuple[list[float], list[float], dict[int | str, int]]:
    """Latencies from due time and from send time (ms), and the count of each status (or
    of each client-side error, by its type)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    due_latency: list[float] = []
    send_latency: list[float] = []
    statuses: dict[int | str, int] = {}
    rng = random.Random(0)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                                 timeout=30) as client:  # fmt: skip

        async def one(due: float, run_id: str) -> None:
            sent = time.perf_counter()
            status: int | str
            try:
                status = (await client.get(f"/runs/{run_id}")).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            end = time.perf_counter()
            due_latency.append((end - due) * 1000)
            send_latency.append((end - sent) * 1000)
            statuses[status] = statuses.get(status, 0) + 1

        tasks = []
        start = time.perf_counter()
        for i in range(int(rps * seconds)):
            due = start + i / rps
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(one(due, rng.choice(run_ids))))
        await asyncio.gather(*tasks)
    return due_latency, send_latency, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rps", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    with bench_stack(batch_concurrency=4, interactive_concurrency=2, latency_ms="200:200") as bench:
        docs = documents(args.runs, "load")
        bench.client.submit_batch([{"id": i, "text": t} for i, t in docs])
        wait_for(lambda: bench.scalar("SELECT count(*) FROM pipeline_run WHERE status = 'done'")
                 >= 8, timeout_s=300)  # fmt: skip
        run_ids = [r["id"] for r in bench.sql("SELECT id::text AS id FROM pipeline_run")]
        by_status = bench.sql("SELECT status, count(*) AS n FROM pipeline_run GROUP BY status")
        due, sent, statuses = asyncio.run(
            open_loop(bench.stack.api_url, bench.stack.api_key, run_ids, args.rps, args.seconds)
        )
        steps_done = bench.scalar("SELECT count(*) FROM pipeline_step_result WHERE status = 'done'")
    achieved = len(due) / args.seconds
    print(f"GET /runs/{{id}} at {args.rps:g}/s: from due time {summary(due)} ms; "
          f"statuses {statuses}")  # fmt: skip
    figures = {
        "rps": args.rps,
        "p50_ms": percentile(due, 50),
        "p99_ms": percentile(due, 99),
        "max_ms": max(due),
        "errors": sum(n for s, n in statuses.items() if s != 200),
    }
    mix = ", ".join(f"{r['n']} {r['status']}" for r in by_status)
    write_report(
        "api-load",
        f"""# `GET /runs/{{id}}` under {args.rps:g} requests/s

`python -m bench.api_load --rps {args.rps:g} --seconds {args.seconds:g} --runs {args.runs}`:
an open-loop generator (asyncio + httpx, up to 64 connections) sends {args.rps:g} requests
per second for {args.seconds:g} s to one API process (uvicorn, as `docpipe stack up` runs
it), each for a random one of {args.runs} runs ({mix} when the load started) while 4 batch
workers process them at 0.2 s per provider call. Latency counts from the moment each
request was due, so queueing in the server shows.

| measure | value |
|---|---|
| requests sent / achieved rate | {len(due)} / {achieved:.0f} per s |
| p50 | **{percentile(due, 50):.1f} ms** |
| p99 | **{percentile(due, 99):.1f} ms** |
| max | {max(due):.1f} ms |
| from send time instead: p50 / p99 | {percentile(sent, 50):.1f} / {percentile(sent, 99):.1f} ms |
| answers by status | {statuses} |
| steps the workers finished meanwhile (total) | {steps_done} |
""",
        figures,
    )


if __name__ == "__main__":
    main()
