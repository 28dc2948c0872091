"""What a queued step costs the broker, and what a worker process costs in memory.

Broker bytes: --queued documents are submitted while nothing consumes, then the waiting
messages are weighed in Redis (``MEMORY USAGE`` of the list, and the raw message length);
for docpipe, also the outbox row that each message has in PostgreSQL. The same for the
plain Celery peers (their messages carry the document and, for (b), the outputs so far)
and for DBOS (no broker: the queued workflow's row in PostgreSQL).

Memory: after --docs documents at 0 s per call, RSS and PSS (shared pages split between
the processes sharing them, as after a fork) of every process of each worker.

    python -m bench.footprint [--queued 200] [--docs 40] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import psycopg
import redis

from bench.harness import REPORTS, bench_stack, wait_for, write_report
from bench.procstat import memory, tree_pids
from bench.systems import (
    Servers,
    celery_system,
    dbos_system,
    docpipe_system,
    documents,
    measure,
)

MB = 1024 * 1024


def worker_memory(pids: list[int]) -> dict[str, float]:
    """Mean and max RSS, and total PSS (MB), over a worker's processes."""
    mems = [memory(pid) for pid in pids]
    return {
        "processes": len(mems),
        "rss_mean_mb": statistics.fmean(m.rss_bytes for m in mems) / MB,
        "rss_max_mb": max(m.rss_bytes for m in mems) / MB,
        "pss_total_mb": sum(m.pss_bytes for m in mems) / MB,
    }


def redis_list_bytes(client: redis.Redis, key: str) -> dict[str, float]:
    count = int(client.llen(key))
    raw = client.lrange(key, 0, -1)
    usage = client.memory_usage(key, samples=0) or 0
    return {
        "messages": count,
        "raw_bytes_per_message": statistics.fmean(len(m) for m in raw) if raw else 0.0,
        "redis_bytes_per_message": usage / count if count else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queued", type=int, default=200)
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    c = args.concurrency
    results: dict[str, dict[str, Any]] = {}
    with bench_stack(batch_concurrency=c, interactive_concurrency=c, latency_ms="0:0") as bench:
        servers = Servers(bench)
        broker = redis.Redis.from_url(servers.redis_url)
        docpipe = docpipe_system(servers)
        measure(servers, docpipe, documents(args.docs, "mem"), concurrency=c, latency_s=0)
        batch_pool = bench.stack.process("worker-batch")
        results["docpipe"] = {"memory": worker_memory(tree_pids(batch_pool.pid))}
        # Queue first steps with nothing consuming: the interactive lane publishes at once.
        for name in ("worker-batch", "worker-interactive", "beat"):
            bench.stack.halt(name, kill=False)
        for doc_id, text in documents(args.queued, "queued"):
            bench.client.put_document(doc_id, text)
            bench.client.extract(doc_id)
        wait_for(lambda: broker.llen("llm_interactive") >= args.queued, timeout_s=60)
        results["docpipe"]["broker"] = redis_list_bytes(broker, "llm_interactive")
        results["docpipe"]["postgres_bytes_per_message"] = float(
            bench.scalar("SELECT avg(pg_column_size(o.*)) FROM outbox o WHERE topic = 'step'")
        )

        for peer in (celery_system(servers, "whole"), celery_system(servers, "steps")):
            peer.start(c)
            peer.reset()
            measure(servers, peer, documents(args.docs, "mem"), concurrency=c, latency_s=0)
            results[peer.name] = {"memory": worker_memory(peer.processes())}
            peer.stop()
            peer_broker = redis.Redis.from_url(servers.peer_env()["PEER_REDIS_URL"])
            peer.submit(documents(args.queued, "queued"))
            results[peer.name]["broker"] = redis_list_bytes(peer_broker, "peer")
            peer.reset()

        dbos = dbos_system(servers)
        dbos.start(c)
        dbos.reset()
        measure(servers, dbos, documents(args.docs, "mem"), concurrency=c, latency_s=0)
        results["dbos"] = {"memory": worker_memory(dbos.processes())}
        dbos.stop()
        dbos.submit(documents(args.queued, "queued"))
        dbos_url = servers.postgres.url.rsplit("/", 1)[0] + "/dbos_peer"
        with psycopg.connect(dbos_url) as conn:
            row = conn.execute(
                "SELECT avg(pg_column_size(w.*)) FROM dbos.workflow_status w"
                " WHERE status = 'ENQUEUED'"
            ).fetchone()
        results["dbos"]["postgres_bytes_per_message"] = float(row[0]) if row and row[0] else 0.0

    figures = {
        "docpipe_broker_bytes_per_step": results["docpipe"]["broker"]["redis_bytes_per_message"],
        "docpipe_raw_message_bytes": results["docpipe"]["broker"]["raw_bytes_per_message"],
        "docpipe_worker_rss_mb": results["docpipe"]["memory"]["rss_mean_mb"],
        "docpipe_worker_pss_total_mb": results["docpipe"]["memory"]["pss_total_mb"],
    }
    (REPORTS / "footprint.json").write_text(json.dumps({"results": results}, indent=1))
    labels = {
        "docpipe": "**docpipe**",
        "celery-whole": "(a) Celery, pipeline in one task",
        "celery-steps": "(b) Celery, one task per step",
        "dbos": "(c) DBOS",
    }
    broker_rows, memory_rows = [], []
    for name, r in results.items():
        b = r.get("broker")
        pg = r.get("postgres_bytes_per_message")
        cells = [
            f"{b['redis_bytes_per_message']:.0f}" if b else "- (no broker)",
            f"{b['raw_bytes_per_message']:.0f}" if b else "-",
            f"{pg:.0f}" if pg is not None else "-",
        ]
        broker_rows.append(f"| {labels[name]} | {' | '.join(cells)} |")
        m = r["memory"]
        memory_rows.append(
            f"| {labels[name]} | {m['processes']} | {m['rss_mean_mb']:.0f} | "
            f"{m['rss_max_mb']:.0f} | {m['pss_total_mb']:.0f} |"
        )
    report = f"""# Footprint: broker bytes per queued step, memory per worker process

`python -m bench.footprint --queued {args.queued} --docs {args.docs} --concurrency {c}`.

## Bytes per queued step

{args.queued} documents submitted with nothing consuming; the waiting messages weighed in
Redis (`MEMORY USAGE` of the queue's list / messages, and the mean raw message) and, where
the queue lives in PostgreSQL, the row (`pg_column_size`).

| system | Redis bytes per queued step | raw message bytes | PostgreSQL bytes per queued step |
|---|---|---|---|
{chr(10).join(broker_rows)}

docpipe's message is ids only (`run_id`, step name, headers); the document and the
outputs stay in PostgreSQL. Plain Celery carries the document (12 KB on average here) in
every message, and (b) the outputs so far as well.

## Memory per worker process (after {args.docs} documents at 0 s per call)

| system | processes | RSS mean (MB) | RSS max (MB) | PSS total (MB) |
|---|---|---|---|---|
{chr(10).join(memory_rows)}

A prefork worker is one main process plus {c} pool processes forked from it: RSS counts the
pages they share in each process, PSS splits them, so the PSS total is what the worker
really occupies. DBOS runs its {c} workflows as threads of one process.
"""
    print(report)
    write_report("footprint", report, figures)


if __name__ == "__main__":
    main()
