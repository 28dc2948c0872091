"""Where a document's time goes at 0.2 s per call: what keeps docpipe from the ideal.

C batch workers process --docs documents with the provider answering in --latency-ms.
Each document holds one worker slot for ``elapsed x C / docs`` on average; that time is
split, from docpipe's own timestamps in PostgreSQL, into:

- ideal: the provider's configured latency x the round trips the document needs
  (sections, ceil(sections / 4) rounds of fields, summary), as in bench.throughput;
- transport: the provider's answers as the worker measured them, beyond that latency
  (HTTP, the provider's event loop, the worker's threads waiting for the GIL);
- inside steps: a step's wall time beyond its round trips (claim, the limiter, the call
  log before and after each call, validation, recording the result);
- hops: from a step's end to the next step's start (outbox publish, Celery ack, the
  worker's fetch and hand-over to a pool process, the claim);
- handoff: a run's end to the first step of the run admitted in its place (admission,
  publish, dispatch, claim);
- ramp-up and tail: the rest, mostly the batch's start and end, when fewer runs than
  workers are in flight (it shrinks as --docs grows).

Beside the split, what the stores did for it: PostgreSQL transactions, Redis script calls
and commands per document, counted by the servers over the measured batch (everything the
stack did meanwhile included: beat's periodic jobs, this script's polling); the provider
calls, tokens and document bytes; and the CPU the workers (with beat and the API),
PostgreSQL, Redis and the provider spent per document. bench.capacity reads these from
time-budget.json: rerunning this benchmark updates the capacity model (docs/capacity.md).

    python -m bench.time_budget [--docs 300] [--concurrency 8] [--latency-ms 200]
"""

from __future__ import annotations

import argparse
import os
import statistics

import redis

from bench.harness import Bench, bench_stack, wait_for, write_report
from bench.procstat import cpu_seconds
from bench.systems import Servers, docpipe_system, documents, rounds

# Steps a worker ran: a text document's extract_text is done as its run is created, before
# the run is admitted, and holds no worker slot.
_PER_DOCUMENT = """
SELECT r.document_id,
       sum(extract(epoch FROM s.finished_at - s.started_at)) AS in_steps_s,
       coalesce(sum(extract(epoch FROM s.started_at - s.previous_end)), 0) AS hops_s
FROM pipeline_run r
JOIN (SELECT e.run_id, e.started_at, e.finished_at,
             lag(e.finished_at) OVER (PARTITION BY e.run_id ORDER BY e.step_index) AS previous_end
      FROM pipeline_step_result e JOIN pipeline_run o ON o.id = e.run_id
      WHERE e.started_at >= o.admitted_at) s ON s.run_id = r.id
WHERE r.batch_id = %s AND r.status = 'done'
GROUP BY r.document_id
"""
# A run admitted when another one ended: from that end to the new run's first step start
# (the first a worker ran).
_HANDOFF = """
SELECT avg(extract(epoch FROM s.started_at - freed.at)) AS handoff_s
FROM pipeline_run r
CROSS JOIN LATERAL (
    SELECT started_at FROM pipeline_step_result
    WHERE run_id = r.id AND started_at >= r.admitted_at ORDER BY step_index LIMIT 1
) s
CROSS JOIN LATERAL (
    SELECT max(e.finished_at) AS at FROM pipeline_run e
    WHERE e.batch_id = r.batch_id AND e.finished_at <= r.admitted_at
) freed
WHERE r.batch_id = %s AND freed.at IS NOT NULL
"""


def _server_counters(bench: Bench) -> dict[str, int]:
    """What the stores have done so far: PostgreSQL's transactions in docpipe's database;
    Redis' script calls (the limiter) and commands in all (a script's own counted each)."""
    # A backend reports its counts at most once a second: a few may still be missing.
    transactions = bench.scalar(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database"
        " WHERE datname = current_database()"
    )
    with redis.Redis.from_url(bench.stack.env["DOCPIPE_REDIS_URL"]) as client:
        info = client.info("stats", "commandstats")  # one round trip, one moment
    scripts = info.get("cmdstat_evalsha", {}).get("calls", 0)
    return {
        "postgres_transactions": int(transactions),
        "redis_script_calls": int(scripts),
        "redis_commands": int(info["total_commands_processed"]),
    }


_CALLS = """
SELECT count(*) AS provider_calls, coalesce(sum(c.input_tokens), 0) AS input_tokens,
       coalesce(sum(c.output_tokens), 0) AS output_tokens
FROM llm_call_log c JOIN pipeline_run r ON r.id = c.run_id WHERE r.batch_id = %s
"""
_DOCUMENT_BYTES = """
SELECT coalesce(sum(octet_length(d.content)), 0) AS bytes
FROM pipeline_run r JOIN document d ON d.tenant_id = r.tenant_id AND d.id = r.document_id
WHERE r.batch_id = %s
"""


def _cpu(bench: Bench) -> dict[str, float]:
    """CPU seconds so far of the stack's parts: docpipe's processes (workers, beat, API),
    PostgreSQL, Redis, the fake provider."""
    servers = Servers(bench)
    groups = {
        "workers": docpipe_system(servers).processes,
        "postgres": servers.postgres_pids,
        "redis": servers.redis_pids,
        "provider": servers.fake_pids,
    }
    return {name: cpu_seconds(pids()) for name, pids in groups.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency-ms", type=int, default=200)
    args = parser.parse_args()
    c, latency_s = args.concurrency, args.latency_ms / 1000
    docs = documents(args.docs, "budget")
    doc_rounds = {doc_id: rounds(text, 4) for doc_id, text in docs}
    ms = f"{args.latency_ms}:{args.latency_ms}"
    with bench_stack(batch_concurrency=c, interactive_concurrency=1, latency_ms=ms) as bench:
        warm = bench.client.submit_batch(
            [{"id": f"warm{i}", "text": t} for i, t in documents(2 * c, "warm")]
        )
        wait_for(lambda: bench.client.batch(warm["batch_id"])["status"] == "done", timeout_s=600)
        counted_before = _server_counters(bench)
        cpu_before = _cpu(bench)
        batch_id = bench.client.submit_batch([{"id": i, "text": t} for i, t in docs])["batch_id"]
        # The end is read from the runs' timestamps, not from this poll: poll rarely, as
        # each look at the batch's progress costs the measured machine CPU.
        wait_for(
            lambda: bench.client.batch(batch_id)["status"] != "running", timeout_s=3600, every_s=1.0
        )
        counted = {k: v - counted_before[k] for k, v in _server_counters(bench).items()}
        cpu_ms = {k: 1000 * (v - cpu_before[k]) / args.docs for k, v in _cpu(bench).items()}
        counted |= {k: int(v) for k, v in bench.sql(_CALLS, batch_id)[0].items()}
        counted["document_bytes"] = int(bench.scalar(_DOCUMENT_BYTES, batch_id))
        load_average = os.getloadavg()[1]  # the machine's, over about the batch's time
        elapsed_s = float(
            bench.scalar(
                "SELECT extract(epoch FROM max(r.finished_at) - b.created_at) FROM pipeline_run r"
                " JOIN batch b ON b.id = r.batch_id WHERE b.id = %s GROUP BY b.created_at",
                batch_id,
            )
        )
        call_s = float(
            bench.scalar(
                "SELECT avg(c.latency_ms) / 1000 FROM llm_call_log c JOIN pipeline_run r"
                " ON r.id = c.run_id WHERE r.batch_id = %s AND c.status = 'ok'",
                batch_id,
            )
        )
        per_doc = bench.sql(_PER_DOCUMENT, batch_id)
        handoff_s = float(bench.scalar(_HANDOFF, batch_id))
    if len(per_doc) != args.docs:
        raise SystemExit(f"{len(per_doc)} of {args.docs} documents done: see the stack's logs")

    mean_rounds = statistics.fmean(doc_rounds[r["document_id"]] for r in per_doc)
    slot_ms = 1000 * elapsed_s * c / args.docs
    ideal_ms = 1000 * latency_s * mean_rounds
    transport_ms = 1000 * (call_s - latency_s) * mean_rounds
    steps_ms = 1000 * statistics.fmean(float(r["in_steps_s"]) for r in per_doc)
    inside_ms = steps_ms - 1000 * call_s * mean_rounds
    hops_ms = 1000 * statistics.fmean(float(r["hops_s"]) for r in per_doc)
    handoff_ms = 1000 * handoff_s
    ramp_ms = slot_ms - ideal_ms - transport_ms - inside_ms - hops_ms - handoff_ms
    parts = [  # (short name, what it is, ms per document)
        ("ideal", "ideal: configured latency x round trips", ideal_ms),
        ("transport", "transport: answers beyond the configured latency", transport_ms),
        ("inside steps", "docpipe inside steps", inside_ms),
        ("hops", "hops between steps", hops_ms),
        ("handoff", "handoff: a run's end to the next run's first step", handoff_ms),
        ("ramp-up and tail", "ramp-up and tail: fewer runs than workers", ramp_ms),
    ]
    share = ideal_ms / slot_ms
    per_doc = {k: v / args.docs for k, v in counted.items()}
    figures = {
        "concurrency": c,
        "latency_ms": args.latency_ms,
        "mean_rounds": mean_rounds,
        "docs_per_s": args.docs / elapsed_s,
        "share_of_ideal": share,
        "slot_ms": slot_ms,
        "mean_call_ms": 1000 * call_s,
        "parts_ms": {name: ms for name, _, ms in parts},
        "per_document": per_doc,
        "cpu_ms_per_document": cpu_ms,
        "load_average_5min": load_average,
    }
    rows = "\n".join(f"| {what} | {ms:.1f} | {ms / slot_ms:.1%} |" for _, what, ms in parts)
    report = f"""# Where a document's time goes at {args.latency_ms} ms per call

`python -m bench.time_budget --docs {args.docs} --concurrency {c} --latency-ms {args.latency_ms}`:
{c} batch workers, {args.docs} documents ({mean_rounds:.2f} provider round trips each on
average), {args.docs / elapsed_s:.2f} documents/s. Each document holds a worker slot for
{slot_ms:.0f} ms on average (elapsed x {c} / {args.docs}); docpipe's timestamps split it:

| part | ms per document | share |
|---|---|---|
{rows}
| **total: one worker slot per document** | **{slot_ms:.1f}** | 100% |

Share of ideal: **{share:.1%}**. The provider's answers took {1000 * call_s:.1f} ms on
average as the workers measured them, for a configured {args.latency_ms} ms.

What the stores did for it, per document (counted by the servers over the batch, the
stack's periodic work included): {per_doc["postgres_transactions"]:.1f} PostgreSQL
transactions; in Redis, {per_doc["redis_script_calls"]:.1f} limiter script calls and
{per_doc["redis_commands"]:.1f} commands in all (a script's own commands counted each);
{per_doc["provider_calls"]:.2f} provider calls with {per_doc["input_tokens"]:.0f} input and
{per_doc["output_tokens"]:.0f} output tokens, for a document of {per_doc["document_bytes"]:.0f}
bytes. CPU per document: workers, beat and API {cpu_ms["workers"]:.1f} ms, PostgreSQL
{cpu_ms["postgres"]:.1f} ms, Redis {cpu_ms["redis"]:.1f} ms, the fake provider
{cpu_ms["provider"]:.1f} ms. These are the inputs of the capacity model (docs/capacity.md,
`python -m bench.capacity`). The machine's load average (5 min) at the end: {load_average:.1f}
on {os.cpu_count()} CPUs, other sessions' work included.
"""
    print(report)
    write_report("time-budget", report, figures)


if __name__ == "__main__":
    main()
