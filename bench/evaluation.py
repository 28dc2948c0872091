"""Evaluations: scoring speed and memory, and what re-evaluating a last-step change costs.

1. Scoring: a report built from 10,000 documents' outputs (sample contracts' true fields,
   a fifth of their values made wrong by the fake provider's own mistakes), each with its
   evidence, as docpipe.state.evaluation_report builds it from the database's rows: documents
   scored per second and the process' peak RSS; then the paired bootstrap of two such
   evaluations (what compare and the gate compute).
2. Re-evaluation: on a local stack (fake provider, no latency), a 20-document set evaluated
   with document_extract:v1, then again with only the last step changed (summarize asked
   of another model): the calls and cost each paid.
3. Upload: on the same stack, sets of ``--upload-items`` items (1,000 and 10,000 sample
   contracts, each with its text, as one JSON-lines body each): the time each took and the
   API's RSS before and at its peak (VmHWM, reset first): the upload is spooled and stored
   in chunks, so the API's peak should not grow with the upload's size.

    python -m bench.evaluation [--documents 10000] [--upload-items 1000,10000]
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import resource
import time
from decimal import Decimal
from typing import Any

from bench.harness import bench_stack, wait_for, write_report
from docpipe.evaluation.paired import paired_difference
from docpipe.pipelines.catalog import load_catalog
from docpipe.settings import Settings
from docpipe.state.evaluation_report import ReportBuilder, RunRow
from docpipe_dev.big_requests import peak_rss_bytes, reset_peak_rss, rss_bytes
from docpipe_dev.samples import expected_items, sample_contracts
from docpipe_fake_llm.mistakes import Mistakes

DISTINCT = 200  # contracts generated; the 10,000 documents cycle through them


def scoring(count: int) -> dict[str, Any]:
    pipeline = load_catalog(Settings()).get("document_extract:v1")
    contracts = sample_contracts(DISTINCT)
    mistakes = Mistakes({"m": 0.2}, seed=5)
    expected: dict[str, Any] = {}
    runs: list[RunRow] = []
    for i in range(count):
        contract = contracts[i % DISTINCT]
        document_id = f"doc-{i:05d}"
        expected[document_id] = {"fields": contract.expected}
        quoted = {n: {"value": v, "quote": "q"} for n, v in contract.expected.items()}
        wrong = mistakes.apply(
            {"fields": copy.deepcopy(quoted)},
            model="m",
            prompt_version=None,
            text=document_id,
            schema=None,
        )["fields"]
        fields = {n: q["value"] for n, q in wrong.items()}
        evidence = [
            {"field": n, "path": f"/fields/{n}", "value": v, "supported": True}
            for n, v in fields.items()
        ]
        got = {"fields": fields, "found_in": {}, "evidence": evidence}
        runs.append(
            RunRow(
                run_id=document_id,
                document_id=document_id,
                status="done",
                error=None,
                content_sha256=contract.slug,
                run_s=1.0,
                outputs={"extract_fields": got},
                cost_usd=Decimal(0),
                input_tokens=0,
                output_tokens=0,
                calls=0,
                reused=0,
                latencies_ms=[],
            )
        )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    load = os.getloadavg()[0]  # on a shared machine, what the speed was measured under
    started = time.perf_counter()
    builder = ReportBuilder(pipeline, "extract_fields", expected, 0.5)
    for run in runs:
        builder.add(run)
        builder.documents.clear()  # written to the database a page at a time
    report = builder.report()
    took = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    accuracies = list(report["accuracy_by_document"].values())
    started = time.perf_counter()
    # A candidate a tenth of whose documents lost a value: the bootstrap has work to do.
    candidate = [a - 0.09 if i % 10 == 0 else a for i, a in enumerate(accuracies)]
    paired_difference(accuracies, candidate)
    bootstrap = time.perf_counter() - started
    return {
        "documents": count,
        "documents_per_s": round(count / took),
        "score_s": round(took, 2),
        "accuracy": report["overall"]["accuracy"],
        "peak_rss_mib": round(peak / 1024),
        "rss_growth_mib": round((peak - before) / 1024),
        "bootstrap_s": round(bootstrap, 2),
        "load_average": round(load, 1),
    }


MIB = 1024 * 1024


def _upload(bench: Any, items: int) -> dict[str, Any]:
    """One JSON-lines upload of ``items`` sample contracts into a new set: its seconds, its
    bytes and the API process' RSS before and at its peak."""
    # Another seed for each size: the documents are new ones, stored with the upload.
    lines = "".join(json.dumps(i) + "\n" for i in expected_items(items, seed=items)).encode()
    name = f"upload-{items}"
    bench.client.create_evaluation_set(name, "document_extract", "extract_fields")
    server = bench.stack.process("api").pid
    reset_peak_rss(server)
    rest = rss_bytes(server)
    started = time.monotonic()
    bench.client.upload_set_items(name, io.BytesIO(lines), "samples")
    seconds = time.monotonic() - started
    return {
        "items": items,
        "body_mib": round(len(lines) / MIB, 1),
        "seconds": round(seconds, 1),
        "api_rss_before_mib": round(rest / MIB, 1),
        "api_peak_rss_mib": round(peak_rss_bytes(server) / MIB, 1),
    }


def re_evaluation(upload_items: list[int]) -> dict[str, Any]:
    with bench_stack(latency_ms="0:0", batch_concurrency=4) as bench:
        client = bench.client
        client.create_evaluation_set("bench", "document_extract", "extract_fields")
        lines = "".join(json.dumps(i) + "\n" for i in expected_items(20)).encode()
        client.upload_set_items("bench", io.BytesIO(lines), "samples")

        def evaluate(models: dict[str, str]) -> dict[str, Any]:
            body = {"set": "bench", "pipeline": "document_extract:v1", "models": models}
            started = client.start_evaluation(body)
            found: dict[str, Any] = wait_for(
                lambda: (e := client.evaluation(started["id"]))["report"] and e, every_s=0.5
            )
            return dict(found["report"])

        full, changed = evaluate({}), evaluate({"summarize": "gpt-4o"})
        uploaded = [_upload(bench, items) for items in upload_items]
    return {
        "full_calls": full["calls"],
        "full_cost_usd": full["cost_usd"],
        "re_evaluation_calls": changed["calls"],
        "re_evaluation_reused": changed["calls_reused"],
        "re_evaluation_cost_usd": changed["cost_usd"],
        "upload": uploaded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument(
        "--upload-items", default="1000,10000", help="comma-separated sizes, one upload each"
    )
    args = parser.parse_args()
    scored = scoring(args.documents)
    print("scoring:", scored)
    again = re_evaluation([int(n) for n in args.upload_items.split(",")])
    uploads = "\n".join(
        f"| {u['items']:,} | {u['body_mib']} MiB | {u['seconds']} s | "
        f"{u['api_rss_before_mib']} MiB | {u['api_peak_rss_mib']} MiB |"
        for u in again["upload"]
    )
    print("re-evaluation:", again)
    markdown = f"""# Evaluations

`python -m bench.evaluation` (docs: guides/measuring-quality.md).

## Scoring

| documents | scored per second | time | peak RSS | RSS growth | paired interval (compare) |
|---|---|---|---|---|---|
| {scored["documents"]:,} | {scored["documents_per_s"]:,} | {scored["score_s"]} s | {scored["peak_rss_mib"]} MiB | {scored["rss_growth_mib"]} MiB | {scored["bootstrap_s"]} s |

Each document is sample contract's fields with a fifth of its values made wrong (measured
accuracy {scored["accuracy"]}), scored field by field with its evidence as an evaluation's
report scores it, in one process (the machine's load average was {scored["load_average"]}
when it started); the documents' rows are written a page at a time, so what grows with the
set is each document's accuracy (kept for compare) and the per-field totals.

## Re-evaluating a change to the last step

| | calls paid | cost |
|---|---|---|
| full evaluation, 20 documents | {again["full_calls"]} | ${again["full_cost_usd"]} |
| after a change to summarize (its model) | {again["re_evaluation_calls"]} ({again["re_evaluation_reused"]} reused) | ${again["re_evaluation_cost_usd"]} |

The change asks summarize of gpt-4o instead of gpt-4o-mini, a model about 17 times the
price: the re-evaluation's 20 calls are all summaries, at gpt-4o's price; every
extract_sections and extract_fields answer was reused at no cost.

## Uploading a set

| items | body | time | API RSS before | API peak RSS |
|---|---|---|---|---|
{uploads}

Each row one `POST /evaluation-sets/{{set}}/items` of new sample contracts, each with its
text, into a set of its own: the API spools the body to a file as it arrives, reads it a
line at a time and stores items and documents in chunks, so what it holds is a chunk, not
the upload: its peak should be about the same for ten times the items.
"""
    write_report("evaluation", markdown, {"scoring": scored, "re_evaluation": again})


if __name__ == "__main__":
    main()
