"""Interactive latency with and without a 1,000-document batch, then cancelling that batch.

The fake provider answers in 0.3-1.5 s and allows R requests/min; docpipe's shared limiter
is set to the same R, the batch pool is sized to saturate it. Single interactive documents
are measured end to end (run created -> run done, server timestamps) alone, then while
the batch runs; then the batch is cancelled mid-way and the provider calls and Redis
messages that follow are counted.

    python -m bench.interactive_latency [--docs 40] [--parallel 4] [--batch 1000] [--rpm 900]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import redis

from bench.harness import Bench, bench_stack, percentile, summary, wait_for, write_report
from docpipe.broker.queues import RUN_ID_HEADER, sub_lists
from docpipe_dev.samples import sample_contracts


def interactive_latencies(bench: Bench, docs: list[str], parallel: int, tag: str) -> list[float]:
    """Seconds from run creation to run done, per document, ``parallel`` at a time."""

    def one(doc: str) -> float:
        run_id = bench.client.extract(doc, idempotency_key=f"{tag}:{doc}")["run_id"]
        status = wait_for(
            lambda: (s := bench.client.run(run_id))["status"] == "done" and s, every_s=0.2
        )
        created = datetime.fromisoformat(status["created_at"])
        finished = datetime.fromisoformat(status["finished_at"])
        return (finished - created).total_seconds()

    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, docs))


def batch_messages(client: redis.Redis, run_ids: set[str]) -> int:
    """Messages of these runs anywhere in Redis: waiting in a queue or unacknowledged."""
    count = 0
    for queue in ("llm_batch", "llm_interactive"):
        for name in sub_lists(queue):
            for raw in client.lrange(name, 0, -1):
                count += json.loads(raw)["headers"].get(RUN_ID_HEADER) in run_ids
    for raw in client.hvals("unacked"):
        count += json.loads(raw)[0]["headers"].get(RUN_ID_HEADER) in run_ids
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rpm", type=int, default=900)
    parser.add_argument("--latency-ms", default="300:1500")
    args = parser.parse_args()
    contracts = sample_contracts(max(args.docs, args.batch))
    env = {
        "DOCPIPE_PROVIDER_RPM": str(args.rpm),
        "DOCPIPE_PROVIDER_BURST": str(max(1, args.rpm // 120)),
    }
    with bench_stack(
        env=env,
        interactive_concurrency=4,
        batch_concurrency=8,
        latency_ms=args.latency_ms,
        rpm=args.rpm,
    ) as bench:
        docs = [f"interactive-{i}" for i in range(args.docs)]
        for doc, contract in zip(docs, contracts, strict=False):
            bench.client.put_document(doc, contract.text)
        alone = interactive_latencies(bench, docs, args.parallel, "alone")
        print(f"alone:      {summary(alone)}")

        batch = bench.client.submit_batch(
            [{"id": f"batch-{i}", "text": c.text} for i, c in enumerate(contracts[: args.batch])]
        )
        batch_id = batch["batch_id"]
        wait_for(lambda: bench.client.batch(batch_id)["steps_done"] >= 30, timeout_s=300)
        under = interactive_latencies(bench, docs, args.parallel, "under-batch")
        progress = bench.client.batch(batch_id)
        print(f"with batch: {summary(under)}  (batch steps done {progress['steps_done']})")

        # Cancel mid-way: no new provider call once the ones in flight have finished.
        cancel_started = time.monotonic()
        bench.client.cancel_batch(batch_id)
        cancel_s = time.monotonic() - cancel_started
        cancelled_at = bench.scalar("SELECT now()")
        time.sleep(5)  # every call in flight at the cancel ends within its latency
        late_calls = bench.scalar(
            "SELECT count(*) FROM llm_call_log c JOIN pipeline_run r ON r.id = c.run_id"
            " WHERE r.batch_id = %s AND c.created_at > %s",
            batch_id,
            cancelled_at,
        )
        in_flight = bench.scalar(
            "SELECT count(*) FROM llm_call_log c JOIN pipeline_run r ON r.id = c.run_id"
            " WHERE r.batch_id = %s AND c.status = 'sent'",
            batch_id,
        )
        run_ids = {
            r["id"]
            for r in bench.sql(
                "SELECT id::text AS id FROM pipeline_run WHERE batch_id = %s", batch_id
            )
        }
        broker = redis.Redis.from_url(bench.stack.env["DOCPIPE_REDIS_URL"])
        leftover = batch_messages(broker, run_ids)
        final = bench.client.batch(batch_id)
        print(
            f"cancel: {cancel_s * 1000:.0f} ms, calls after cancel {late_calls}, unanswered "
            f"{in_flight}, batch messages left in Redis {leftover}, runs {final['runs_by_status']}"
        )

    ratio50 = percentile(under, 50) / percentile(alone, 50)
    ratio95 = percentile(under, 95) / percentile(alone, 95)
    print(f"ratio p50 {ratio50:.3f}  p95 {ratio95:.3f}")
    write_report(
        "interactive-latency",
        f"""# Interactive latency under a {args.batch}-document batch, and cancelling it

`python -m bench.interactive_latency --docs {args.docs} --parallel {args.parallel} --batch \
{args.batch} --rpm {args.rpm}`. Fake provider: {args.latency_ms} ms per call, limited to
{args.rpm} requests/min; docpipe's shared limiter set to the same rate; 4 interactive and 8
batch worker processes, 4 calls in flight per step, admission window 8.

End to end per document (run created -> done), {args.parallel} documents at a time:

| | p50 (s) | p95 (s) | all |
|---|---|---|---|
| alone | {percentile(alone, 50):.2f} | {percentile(alone, 95):.2f} | {summary(alone)} |
| during the batch | {percentile(under, 50):.2f} | {percentile(under, 95):.2f} | {summary(under)} |
| **ratio** | **{ratio50:.3f}** | **{ratio95:.3f}** | target p95 ratio <= 1.15 |

Cancelling the batch mid-way (after {progress["steps_done"]} of its steps):

| measure | value |
|---|---|
| `POST /batches/{{id}}/cancel` took | {cancel_s * 1000:.0f} ms |
| provider calls started after the cancel | {late_calls} |
| calls left unanswered | {in_flight} |
| messages of the batch left in Redis (queues + unacked) | {leftover} |
| runs by status after the cancel | {final["runs_by_status"]} |
""",
        {
            "p50_ratio": ratio50,
            "p95_ratio": ratio95,
            "calls_after_cancel": late_calls,
            "messages_left": leftover,
        },
    )


if __name__ == "__main__":
    main()
