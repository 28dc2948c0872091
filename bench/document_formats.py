"""Documents in every format: text extraction speed, a mixed batch, and a kill during OCR.

1. Pages per second of one worker process (one thread, as a prefork child runs a step)
   for native PDF text (one column and two), DOCX and OCR of scanned pages (upright, and
   fed in sideways), measured on the readers directly. With ``--against DIR`` (the
   ``libs/common/src`` of another checkout, e.g. ``git archive`` of an earlier commit) the
   same files are read by both, in turns (``--speed-rounds``), and both medians reported.
2. A mixed batch (text, PDF, DOCX and scanned PDF in equal shares) through the batch lane
   of a whole local stack: time from POST /batches to the batch's end.
3. Crash cost of a SIGKILL in the middle of OCR: a scanned contract, the interactive worker
   killed (every process of it) once two pages are read and started again at once; pages
   read twice (``document_page.attempts``), and the time to resume and to finish.

    python -m bench.document_formats [--documents 200] [--batch-concurrency 2] [--rounds 3]
        [--speed-documents 8] [--against DIR --speed-rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import bench_stack, wait_for, write_report
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.pages import PageLimits
from docpipe.extraction.pdf import PdfReader
from docpipe.extraction.zipguard import ZipBounds
from docpipe.settings import Settings
from docpipe_dev.sample_files import contract_docx, contract_in_columns, contract_pdf, contract_scan
from docpipe_dev.samples import sample_contracts

FORMATS = ("text", "pdf", "docx", "scan")


def pages_per_second(
    make: Callable[[str, int], bytes], open_reader: Callable[[bytes], Any], count: int
) -> tuple[float, float, int]:
    """Pages per second reading ``count`` sample contracts made by ``make``, by the clock
    and per CPU second (this process and its Tesseract children: on a shared machine the
    clock measures the neighbours too); and pages."""
    files = [make(c.text, i) for i, c in enumerate(sample_contracts(count))]
    pages, started, cpu = 0, time.perf_counter(), _cpu_seconds()
    for data in files:
        reader = open_reader(data)
        for index in range(reader.page_count):
            reader.read_page(index)
        pages += reader.page_count
        reader.close()
    return pages / (time.perf_counter() - started), pages / (_cpu_seconds() - cpu), pages


def _cpu_seconds() -> float:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def reading_speed(count: int) -> dict[str, dict[str, float]]:
    settings = Settings()
    limits = PageLimits.of(settings)
    bounds = ZipBounds(settings.docx_max_expanded_bytes, settings.docx_max_expansion_ratio)
    pdf, scans = (lambda d: PdfReader(d, limits)), max(2, count // 4)
    cases: dict[str, tuple[Callable[[str, int], bytes], Callable[[bytes], Any], int]] = {
        "pdf (text layer)": (lambda t, i: contract_pdf(t), pdf, count),
        "pdf (two columns)": (lambda t, i: contract_in_columns(t), pdf, count),
        "docx": (lambda t, i: contract_docx(t), lambda d: DocxReader(d, limits, bounds), count),
        "scanned pdf (OCR)": (contract_scan, pdf, scans),
        "scanned pdf, sideways (OCR)": (lambda t, i: contract_scan(t, i, turned=270), pdf, scans),
    }
    speeds = {}
    for name, (make, open_reader, n) in cases.items():
        rate, per_cpu, pages = pages_per_second(make, open_reader, n)
        speeds[name] = {
            "pages_per_s": round(rate, 2),
            "pages_per_cpu_s": round(per_cpu, 2),
            "pages": pages,
        }
        print(
            f"{name:28} {rate:8.2f} pages/s per worker process, {per_cpu:8.2f} per CPU "
            f"second ({pages} pages)",
            file=sys.stderr,
        )
    return speeds


def interleaved_speeds(
    count: int, against: Path, rounds: int
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """The median reading speeds of this tree and of ``against`` (a library source tree),
    each measured ``rounds`` times in turns, in processes of their own."""
    runs: dict[bool, list[dict[str, dict[str, float]]]] = {False: [], True: []}
    for r in range(rounds):
        for earlier in (r % 2 == 1, r % 2 == 0):  # who goes first alternates
            env = dict(os.environ)
            if earlier:
                env["PYTHONPATH"] = os.pathsep.join([str(against), env.get("PYTHONPATH", "")])
            argv = [
                sys.executable,
                "-m",
                "bench.document_formats",
                "--speed-only",
                "--speed-documents",
                str(count),
            ]
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            runs[earlier].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}, {'before' if earlier else 'now'}:", file=sys.stderr)
            print(done.stderr.strip(), file=sys.stderr)

    def median(found: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
        return {
            name: {
                key: round(statistics.median(f[name][key] for f in found), 2)
                for key in ("pages_per_s", "pages_per_cpu_s")
            }
            | {"pages": found[0][name]["pages"]}
            for name in found[0]
        }

    return median(runs[False]), median(runs[True])


def upload(bench: Any, doc_id: str, fmt: str, text: str, seed: int) -> None:
    if fmt == "text":
        bench.client.put_document(doc_id, text)
        return
    makers = {
        "pdf": lambda: contract_pdf(text),
        "docx": lambda: contract_docx(text),
        "scan": lambda: contract_scan(text, seed),
    }
    bench.client.put_file(doc_id, makers[fmt]())


def mixed_batch(documents: int, batch_concurrency: int) -> dict[str, Any]:
    contracts = sample_contracts(documents)
    env = {"DOCPIPE_BATCH_ADMISSION_WINDOW": str(batch_concurrency)}
    with bench_stack(env=env, batch_concurrency=batch_concurrency, latency_ms="0:0") as bench:
        ids = []
        for i, contract in enumerate(contracts):
            fmt = FORMATS[i % len(FORMATS)]
            ids.append(f"{contract.slug}-{fmt}")
            upload(bench, ids[-1], fmt, contract.text, i)
        started = time.monotonic()
        batch = bench.client.submit_batch([{"id": d} for d in ids])
        wait_for(
            lambda: bench.client.batch(batch["batch_id"])["status"] != "running",
            timeout_s=7200,
            every_s=1.0,
        )
        elapsed = time.monotonic() - started
        status = bench.client.batch(batch["batch_id"])
        pages = bench.scalar("SELECT count(*) FROM document_page")
        ocr_pages = bench.scalar("SELECT count(*) FROM document_page WHERE ocr")
        done = bench.scalar("SELECT count(*) FROM pipeline_run WHERE status = 'done'")
    result = {
        "documents": documents,
        "batch_concurrency": batch_concurrency,
        "seconds": round(elapsed, 1),
        "runs_done": done,
        "pages_read": pages,
        "ocr_pages": ocr_pages,
        "runs": status.get("runs"),
    }
    print(
        f"mixed batch: {documents} documents ({done} done), {pages} pages read "
        f"({ocr_pages} by OCR), {elapsed:.1f} s with {batch_concurrency} batch processes"
    )
    return result


def kill_during_ocr(rounds: int) -> list[dict[str, Any]]:
    results = []
    with bench_stack(interactive_concurrency=1, latency_ms="0:0") as bench:
        for r in range(rounds):
            contract = sample_contracts(r + 1)[r]
            doc_id = f"scan-{r}"
            bench.client.put_file(doc_id, contract_scan(contract.text, r))
            run_id = bench.client.extract(doc_id, idempotency_key=doc_id)["run_id"]

            def read(doc: str = doc_id) -> int:
                return int(
                    bench.scalar(
                        "SELECT count(*) FROM document_page WHERE "
                        "document_id = %s AND finished_at IS NOT NULL",
                        doc,
                    )
                )

            wait_for(lambda read=read: read() >= 2, timeout_s=300, every_s=0.05)
            killed = time.monotonic()
            bench.stack.replace("worker-interactive", kill=True)
            before = read()
            wait_for(lambda read=read, before=before: read() > before, timeout_s=300, every_s=0.05)
            resumed = time.monotonic() - killed
            wait_for(
                lambda run_id=run_id: (
                    bench.client.run(run_id)["status"] != "running"
                    and bench.client.run(run_id)["status"] != "queued"
                ),
                timeout_s=600,
            )
            finished = time.monotonic() - killed
            rows = bench.sql("SELECT attempts FROM document_page WHERE document_id = %s", doc_id)
            pages = len(rows)
            redone = sum(row["attempts"] for row in rows) - pages
            status = bench.client.run(run_id)["status"]
            results.append(
                {
                    "pages": pages,
                    "read_before_kill": before,
                    "pages_redone": redone,
                    "resume_s": round(resumed, 1),
                    "done_s": round(finished, 1),
                    "status": status,
                }
            )
            print(
                f"kill during OCR, round {r + 1}: {pages} pages, {before} read before the "
                f"kill, {redone} read twice; next page read {resumed:.1f} s after the kill, "
                f"run {status} after {finished:.1f} s"
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--batch-concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--speed-documents", type=int, default=8)
    parser.add_argument(
        "--speed-only",
        action="store_true",
        help="only the reading speeds, as JSON on the last line",
    )
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another library source tree to compare the reading speeds with",
    )
    parser.add_argument(
        "--against-label", default=None, help="what --against is, for the report (e.g. a commit)"
    )
    parser.add_argument("--speed-rounds", type=int, default=3)
    args = parser.parse_args()
    if args.speed_only:
        print(json.dumps(reading_speed(args.speed_documents)))
        return
    before = None
    if args.against is not None:
        speeds, before = interleaved_speeds(args.speed_documents, args.against, args.speed_rounds)
    else:
        speeds = reading_speed(args.speed_documents)
    crashes = kill_during_ocr(args.rounds)
    batch = mixed_batch(args.documents, args.batch_concurrency)
    redone = [c["pages_redone"] for c in crashes]
    earlier = before or {}
    rows = "\n".join(
        f"| {name} | {s['pages_per_s']} | {earlier.get(name, {}).get('pages_per_s', '')} | "
        f"{s['pages_per_cpu_s']} | {earlier.get(name, {}).get('pages_per_cpu_s', '')} | "
        f"{s['pages']} |"
        for name, s in speeds.items()
    )
    against = (
        f" --against DIR --against-label {args.against_label or 'DIR'} --speed-rounds "
        f"{args.speed_rounds}"
        if args.against
        else ""
    )
    compared = (
        f"Before: the library of {args.against_label or args.against}, the same files, "
        f"{args.speed_rounds} rounds in turns, medians."
        if args.against
        else "(No earlier tree measured: run with --against to fill the before column.)"
    )
    crash_rows = "\n".join(
        f"| {i + 1} | {c['pages']} | {c['read_before_kill']} | {c['pages_redone']} | "
        f"{c['resume_s']} | {c['done_s']} | {c['status']} |"
        for i, c in enumerate(crashes)
    )
    markdown = f"""# Documents: extraction speed, a mixed batch, a kill during OCR

`python -m bench.document_formats --documents {args.documents} --batch-concurrency
{args.batch_concurrency} --rounds {args.rounds} --speed-documents {args.speed_documents}{against}`
(the fake provider answers at once).

## Pages per second of one worker process

| format | pages/s | before | pages per CPU second | before | pages read |
|---|---|---|---|---|---|
{rows}

{compared}

## {args.documents} documents, a quarter of each format, through the batch lane

{batch["seconds"]} s with {args.batch_concurrency} batch worker processes: {batch["runs_done"]}
runs done, {batch["pages_read"]} pages read, {batch["ocr_pages"]} of them by OCR.

## SIGKILL of the worker in the middle of OCR

| round | pages | read before the kill | read twice | next page after (s) | done after (s) | status |
|---|---|---|---|---|---|---|
{crash_rows}

At most the page on Tesseract when the worker died is read again: {max(redone)} page(s)
redone at most, {statistics.fmean(redone):.1f} on average.
"""
    figures = {"speeds": speeds, "speeds_before": before, "batch": batch, "crashes": crashes}
    path = write_report("document-formats", markdown, figures)
    print(f"report: {path}")


if __name__ == "__main__":
    main()
