"""The API's memory against big bodies, files and batches: peak RSS of the uvicorn process.

Files first: a PDF at its limit (DOCPIPE_MAX_PDF_BYTES, 50 MB) uploaded to
PUT /documents/{id}, declared and chunked, one over the limit, and two at once; read and
stored in chunks, a file should cost a few MiB whatever its size. Then bodies of inline texts are streamed to POST /batches (docpipe_dev.big_requests); after each
the process' peak RSS (VmHWM, reset before the request) is read. Texts over the per-document
limit measure reading and parsing a body (413 naming the document, nothing stored); texts
under it measure a stored batch; bodies over DOCPIPE_MAX_BATCH_BYTES are refused while
arriving, declared (Content-Length) or chunked. Last, DOCPIPE_MAX_BATCH_BODIES_IN_FLIGHT
bodies at the cap at once, and one more, which gets 503. The growth over the process at rest
divided by the body size is the overhead factor of the chart's memory arithmetic
(values.yaml, api.resources).

    python -m bench.api_memory
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.harness import bench_stack, write_report
from docpipe.settings import Settings
from docpipe_dev.big_requests import (
    Answer,
    batch_body_chunks,
    batch_body_length,
    file_chunks,
    peak_rss_bytes,
    post_in_chunks,
    reset_peak_rss,
    rss_bytes,
)
from docpipe_dev.sample_files import contract_pdf_with_photos
from docpipe_dev.samples import sample_contracts

MB = 1_000_000
MIB = 1024 * 1024
CHART_LIMIT_MIB = 512


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args()
    settings = Settings()
    cap, per_document = settings.max_batch_bytes, settings.max_document_bytes
    over, under = per_document * 3 // 2, per_document * 95 // 100
    rows: list[dict[str, Any]] = []
    with bench_stack(latency_ms="0:0", interactive_concurrency=1, batch_concurrency=1) as b:
        api = b.stack.process("api")
        headers = {"Authorization": f"Bearer {b.stack.api_key}"}
        url = b.stack.api_url

        def post(documents: int, text_bytes: int, *, declared: bool = True) -> Answer:
            length = batch_body_length(documents, text_bytes)
            return post_in_chunks(
                url,
                "/batches",
                batch_body_chunks(documents, text_bytes),
                headers=headers,
                content_length=length if declared else None,
            )

        post(1, 1000)  # warm up: imports, pools and caches a first batch fills
        at_rest = rss_bytes(api.pid)
        # Files first, while the process holds no memory a big batch left behind.
        rows += _file_uploads(url, headers, api.pid, settings.max_pdf_bytes)
        cases = [(n, over, True, "oversized texts") for n in (1, 4, 8, 16)]
        cases += [(cap // over, over, True, "oversized texts, at the cap")]
        cases += [(cap // under - 1, under, True, "texts under the limit: stored")]
        cases += [(2 * cap // over + 10, over, True, "over the cap, Content-Length")]
        cases += [(2 * cap // over + 10, over, False, "over the cap, chunked")]
        for documents, text_bytes, declared, what in cases:
            reset_peak_rss(api.pid)
            before = rss_bytes(api.pid)
            answer = post(documents, text_bytes, declared=declared)
            rows.append(
                _row(
                    what,
                    batch_body_length(documents, text_bytes),
                    1,
                    answer.status,
                    peak_rss_bytes(api.pid),
                    before,
                )
            )

        slots = settings.max_batch_bodies_in_flight
        for text_bytes, what in ((over, "oversized texts"), (under, "stored")):
            documents = cap // text_bytes - 1
            reset_peak_rss(api.pid)
            before = rss_bytes(api.pid)
            with ThreadPoolExecutor(slots + 1) as pool:
                sizes = [documents] * (slots + 1)
                answers = list(pool.map(post, sizes, [text_bytes] * (slots + 1)))
            statuses = "/".join(str(s) for s in sorted(a.status for a in answers))
            rows.append(
                _row(
                    f"{slots + 1} at the cap at once, {what}",
                    batch_body_length(documents, text_bytes),
                    slots,
                    statuses,
                    peak_rss_bytes(api.pid),
                    before,
                )
            )

    lines = [
        f"API process at rest: {at_rest / MIB:.0f} MiB RSS; DOCPIPE_MAX_BATCH_BYTES={cap}, "
        f"DOCPIPE_MAX_DOCUMENT_BYTES={per_document}, DOCPIPE_MAX_BATCH_BODIES_IN_FLIGHT="
        f"{settings.max_batch_bodies_in_flight}, DOCPIPE_MAX_PDF_BYTES={settings.max_pdf_bytes}; "
        f"the chart's limit: {CHART_LIMIT_MIB}Mi.",
        "",
        "| body | MB | status | peak RSS MiB | growth MiB | growth / bytes held |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['body_mb']:.1f} | {r['status']} | "
            f"{r['peak_mib']:.0f} | {r['growth_mib']:.0f} | {r['factor']:.2f} |"
        )
    report = "# API memory against big bodies: batches and files\n\n" + "\n".join(lines)
    print(report)
    write_report("api-memory", report, {"at_rest_mib": at_rest / MIB, "rows": rows})


def _file_uploads(url: str, headers: dict[str, str], pid: int, limit: int) -> list[dict[str, Any]]:
    """PDFs at the limit to PUT /documents/{id}: one declared, one chunked, two at once;
    one over the limit. Each is a new document (a file stored again is a no-op)."""
    texts = [c.text for c in sample_contracts(4)]
    files = [contract_pdf_with_photos(t, limit, seed=i) for i, t in enumerate(texts)]
    over = contract_pdf_with_photos(texts[0], limit * 6 // 5, seed=9)
    names = iter(f"big-{i}" for i in range(10))

    def put(data: bytes, *, declared: bool = True) -> Answer:
        return post_in_chunks(
            url,
            f"/documents/{next(names)}",
            file_chunks(data),
            headers=headers,
            method="PUT",
            content_type="application/pdf",
            content_length=len(data) if declared else None,
            timeout_s=300,
        )

    rows = []
    for what, data, declared in (
        ("a PDF at the limit: stored", files[0], True),
        ("a PDF at the limit, chunked: stored", files[1], False),
        ("a PDF over the limit, Content-Length", over, True),
        ("a PDF over the limit, chunked", over, False),
    ):
        reset_peak_rss(pid)
        before = rss_bytes(pid)
        answer = put(data, declared=declared)
        rows.append(_row(what, len(data), 1, answer.status, peak_rss_bytes(pid), before))
    reset_peak_rss(pid)
    before = rss_bytes(pid)
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(put, files[2:]))
    statuses = "/".join(str(a.status) for a in answers)
    rows.append(
        _row(
            "2 PDFs at the limit at once: stored",
            len(files[2]),
            2,
            statuses,
            peak_rss_bytes(pid),
            before,
        )
    )
    return rows


def _row(case: str, body: int, held: int, status: object, peak: int, before: int) -> dict[str, Any]:
    """``growth``: the peak over the RSS just before the request (memory the process kept
    from an earlier request is reused, not counted again)."""
    growth = max(peak - before, 0)
    return {
        "case": case,
        "body_mb": body / MB,
        "status": status,
        "peak_mib": peak / MIB,
        "growth_mib": growth / MIB,
        # Bytes of memory per byte of body held: for a refused body, per byte received.
        "factor": growth / (held * min(body, _cap_of(case))),
    }


def _cap_of(case: str) -> int:
    settings = Settings()
    return settings.max_pdf_bytes if "PDF" in case else settings.max_batch_bytes


if __name__ == "__main__":
    main()
