"""The results export of a 10,000-run batch: the API's peak RSS and the throughput (runs/s,
MB/s) of `GET /batches/{id}/results` as JSON lines, as CSV and as an XLSX workbook (its
evidence sheet included).

A few sample contracts run through document_extract:v1 on the real stack (fake provider, no
latency) to get real step outputs; those outputs are then copied in PostgreSQL into batches
of 1,000 and 10,000 runs (88 % done, 5 % in review, 4 % failed, 2 % cancelled, 1 % over
budget), so that no 10,000 pipelines need to run. Each export is read over HTTP as fast as
the client takes it; the API's peak RSS (VmHWM, reset before each export) is read after it.

    python -m bench.results_export [--runs 10000] [--templates 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from bench.harness import Bench, bench_stack, wait_for, write_report
from bench.procstat import cpu_seconds
from docpipe.statuses import RunStatus
from docpipe_dev.big_requests import peak_rss_bytes, reset_peak_rss, rss_bytes
from docpipe_dev.samples import sample_contracts

MIB = 1024 * 1024
MB = 1_000_000
# Status of run i of a seeded batch: the first matching share of i % 100.
_STATUS_MIX = (
    (88, "done"),
    (93, "needs_review"),
    (97, "failed"),
    (99, "cancelled"),
    (100, "budget_exceeded"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--templates", type=int, default=20, help="contracts run for real")
    parser.add_argument("--rounds", type=int, default=3, help="exports per size and format")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with bench_stack(latency_ms="0:0", interactive_concurrency=1, batch_concurrency=4) as b:
        template_batch = _run_templates(b, args.templates)
        api = b.stack.process("api")
        sizes = sorted({min(1000, args.runs), args.runs})
        batches = {n: _seed_batch(b, template_batch, n) for n in sizes}
        output_kb = b.scalar(
            "SELECT avg(pg_column_size(output)) / 1000.0 FROM pipeline_step_result s "
            "JOIN pipeline_run r ON r.id = s.run_id WHERE r.batch_id = %s",
            template_batch,
        )
        _export(b, batches[sizes[0]], "jsonl")  # warm up: imports, pools, caches
        at_rest = rss_bytes(api.pid)
        load_before = os.getloadavg()[0]
        for runs, batch_id in batches.items():
            for fmt in ("jsonl", "csv", "xlsx"):
                measured = [_measured_export(b, api.pid, batch_id, fmt) for _ in range(args.rounds)]
                assert all(m["lines"] == measured[0]["lines"] for m in measured)
                rows.append(_row(runs, fmt, measured, at_rest))
        load_after = os.getloadavg()[0]
        plan = _plan(b, batches[args.runs])

    lines = [
        f"# Results export of a {args.runs:,}-run batch",
        "",
        f"`python -m bench.results_export --runs {args.runs} --templates {args.templates} "
        f"--rounds {args.rounds}`: {args.templates} sample contracts through "
        "document_extract:v1 on the local stack (fake provider), their step outputs "
        f"(mean {output_kb:.1f} kB a step in PostgreSQL) copied into batches of "
        f"{' and '.join(f'{n:,}' for n in sizes)} runs (88 % done, 5 % in review, 4 % failed, "
        "2 % cancelled, 1 % over budget). Each export read in full over HTTP on localhost, "
        f"{args.rounds} times; the API process at rest: {at_rest / MIB:.0f} MiB RSS. The "
        f"machine's load average (1 min) was {load_before:.1f} before the exports and "
        f"{load_after:.1f} after: throughput moves with what else runs on it, the API's CPU "
        "time per run and its memory much less.",
        "",
        "| runs | format | body MB | seconds (median) | runs/s | MB/s | API CPU s | runs per "
        "API CPU s | API peak RSS MiB | growth over rest MiB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['runs']:,} | {r['format']} | {r['body_mb']:.1f} | {r['seconds']:.2f} | "
            f"{r['runs_per_s']:,.0f} | {r['mb_per_s']:.1f} | {r['api_cpu_s']:.2f} | "
            f"{r['runs_per_api_cpu_s'] or 0:,.0f} | {r['peak_rss_mib']:.0f} | "
            f"{r['growth_mib']:.0f} |"
        )
    lines += [
        "",
        "The body is never held whole: the API reads 200 runs at a time from a server-side "
        "cursor and sends them before it reads more, so its peak stays near its resting size "
        "whether the batch has 1,000 runs or 10,000 (compare the rows).",
        "",
        f"The query's plan for the {args.runs:,}-run batch (the runs found by "
        "pipeline_run_batch_position_idx and put in the order they were sent first, their "
        "outputs read after the sort):",
        "",
        "```",
        plan,
        "```",
    ]
    report = "\n".join(lines)
    print(report)
    write_report(
        "results-export",
        report,
        {
            "runs": args.runs,
            "at_rest_mib": at_rest / MIB,
            "load": [load_before, load_after],
            "rows": rows,
        },
    )


def _run_templates(b: Bench, count: int) -> str:
    """A batch of ``count`` sample contracts run for real; its id once every run ended."""
    documents = [
        {"id": f"template-{i}", "text": c.text} for i, c in enumerate(sample_contracts(count))
    ]
    batch_id = str(b.client.submit_batch(documents)["batch_id"])
    wait_for(lambda: b.client.batch(batch_id)["status"] != "running", timeout_s=900, every_s=1)
    done = b.scalar(
        "SELECT count(*) FROM pipeline_run WHERE batch_id = %s AND status = 'done'", batch_id
    )
    print(f"{done} of {count} template runs done")
    return batch_id


def _seed_batch(b: Bench, template_batch: str, runs: int) -> str:
    """A batch of ``runs`` ended runs whose step outputs are the template runs' (in turn)."""
    batch_id = str(uuid.uuid4())
    status = " ".join(f"WHEN g.i %% 100 < {share} THEN '{name}'" for share, name in _STATUS_MIX)
    with psycopg.connect(b.database_url, autocommit=True) as conn:
        conn.execute(
            _SEED.replace("{status}", status).encode(),
            {"template": template_batch, "batch": batch_id, "runs": runs},
        )
        conn.execute(b"ANALYZE pipeline_run")
        conn.execute(b"ANALYZE pipeline_step_result")
    return batch_id


# The template runs, numbered; the new batch, its documents and runs (each the copy of
# template i % n, with its status from the mix) and their steps: a step a run did not reach
# has no output.
_SEED = """
WITH template AS (
    SELECT id, tenant_id, pipeline, pipeline_hash, steps_total, cost_usd,
           row_number() OVER (ORDER BY id) - 1 AS k, count(*) OVER () AS n
    FROM pipeline_run WHERE batch_id = %(template)s AND status = 'done'
), batch_row AS (
    INSERT INTO batch (id, tenant_id, pipeline, status, runs_total, finished_at)
    SELECT %(batch)s, tenant_id, pipeline, 'done', %(runs)s, now() FROM template WHERE k = 0
), seeded AS (
    SELECT gen_random_uuid() AS id, g.i, t.id AS template_id, t.tenant_id, t.pipeline,
           t.pipeline_hash, t.steps_total, t.cost_usd, CASE {status} END AS status
    FROM generate_series(0, %(runs)s - 1) g (i) JOIN template t ON t.k = g.i %% t.n
), documents AS (
    INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes)
    SELECT tenant_id, 'seed-' || %(batch)s || '-' || i, 'seeded', 'seeded', 6 FROM seeded
), new_runs AS (
    INSERT INTO pipeline_run (id, tenant_id, pipeline, pipeline_hash, document_id, lane,
                              batch_id, status, steps_total, steps_done, cost_usd,
                              idempotency_key, request_hash, error, admitted_at, finished_at)
    SELECT id, tenant_id, pipeline, pipeline_hash, 'seed-' || %(batch)s || '-' || i, 'batch',
           %(batch)s, status, steps_total,
           CASE WHEN status IN ('done', 'needs_review') THEN steps_total ELSE 1 END, cost_usd,
           'batch:' || %(batch)s || ':' || (i + 1), 'seeded',
           CASE status
               WHEN 'needs_review' THEN 'unsupported_evidence: 1 value(s) whose quote is not '
                                        || 'in the document (liability_cap)'
               WHEN 'failed' THEN 'the document is empty'
               WHEN 'cancelled' THEN 'batch cancelled'
               WHEN 'budget_exceeded' THEN 'run budget of 0.01 USD spent'
           END, now(), now()
    FROM seeded
)
INSERT INTO pipeline_step_result (run_id, step, step_index, status, attempt, output, model,
                                  prompt_version, cost_usd, finished_at)
SELECT s.id, t.step, t.step_index,
       CASE WHEN s.status IN ('done', 'needs_review') OR t.step_index = 0 THEN 'done'
            WHEN s.status = 'cancelled' THEN 'cancelled' ELSE 'failed' END,
       1,
       CASE WHEN s.status IN ('done', 'needs_review') OR t.step_index = 0 THEN t.output END,
       t.model, t.prompt_version, t.cost_usd, now()
FROM seeded s JOIN pipeline_step_result t ON t.run_id = s.template_id
"""


def _export(b: Bench, batch_id: str, fmt: str) -> tuple[int, int, float]:
    """(bytes, lines, seconds) of one whole export read over HTTP."""
    headers = {"Authorization": f"Bearer {b.stack.api_key}"}
    url = f"{b.stack.api_url}/batches/{batch_id}/results"
    started = time.perf_counter()
    size = newlines = 0
    params = {"format": fmt}
    with httpx.stream("GET", url, params=params, headers=headers, timeout=600) as answer:
        answer.raise_for_status()
        for block in answer.iter_raw():
            size += len(block)
            newlines += block.count(b"\n")
    return size, newlines, time.perf_counter() - started


def _measured_export(b: Bench, pid: int, batch_id: str, fmt: str) -> dict[str, Any]:
    reset_peak_rss(pid)
    cpu = cpu_seconds([pid])
    size, lines, seconds = _export(b, batch_id, fmt)
    return {
        "bytes": size,
        "lines": lines,
        "seconds": seconds,
        "peak": peak_rss_bytes(pid),
        "cpu_s": cpu_seconds([pid]) - cpu,
    }


def _row(runs: int, fmt: str, measured: list[dict[str, Any]], at_rest: int) -> dict[str, Any]:
    seconds = statistics.median(m["seconds"] for m in measured)
    cpu_s = statistics.median(m["cpu_s"] for m in measured)
    peak = max(m["peak"] for m in measured)
    size = measured[0]["bytes"]
    return {
        "runs": runs,
        "format": fmt,
        "body_mb": size / MB,
        "lines": measured[0]["lines"],
        "seconds": seconds,
        "runs_per_s": runs / seconds,
        "api_cpu_s": cpu_s,
        "runs_per_api_cpu_s": runs / cpu_s if cpu_s else None,
        "mb_per_s": size / MB / seconds,
        "peak_rss_mib": peak / MIB,
        "growth_mib": max(peak - at_rest, 0) / MIB,
    }


def _plan(b: Bench, batch_id: str) -> str:
    from docpipe.state.db import load_queries

    query = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + load_queries()["batch_results"]
    params = {
        "batch_id": batch_id,
        "statuses": [s.value for s in RunStatus],
        "after_position": -1,
        "after": "00000000-0000-0000-0000-000000000000",
        "tenant_id": b.scalar("SELECT tenant_id FROM batch WHERE id = %s", batch_id),
    }
    with psycopg.connect(b.database_url, row_factory=dict_row) as conn:
        rows = conn.execute(query.encode(), params).fetchall()
    return "\n".join(r["QUERY PLAN"] for r in rows)


if __name__ == "__main__":
    main()
