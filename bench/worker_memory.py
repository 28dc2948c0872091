"""A worker's memory reading a big scan: the peak RSS of the worker process that runs
extract_text on a 300-page scanned PDF of about 50 MB (greyscale JPEG pages at 200 dpi,
made here from the sample contracts), page by page with Tesseract.

The scan is stored straight into PostgreSQL (the upload's own limits are the API's
business, measured in the api-memory benchmark), one interactive worker process (prefork,
concurrency 1) reads it, and the RSS of the worker's processes is sampled every half second
until extract_text is done; the pool process' VmHWM is its peak. The run is cancelled
after extract_text (the later steps send the fake provider the text, which is another
benchmark's business).

    python -m bench.worker_memory [--pages 300] [--megabytes 50] [--read-pages N]
"""

from __future__ import annotations

import argparse
import io
import time
from typing import Any

import pypdfium2 as pdfium
from fpdf import FPDF
from PIL import Image, ImageFilter

from bench.harness import Bench, bench_stack, wait_for, write_report
from bench.procstat import tree_pids
from docpipe.state.db import Database
from docpipe.state.documents import put_file
from docpipe.state.tenants import DEFAULT_TENANT
from docpipe_dev.big_requests import peak_rss_bytes, rss_bytes
from docpipe_dev.sample_files import contract_pdf
from docpipe_dev.samples import sample_contracts

MB = 1_000_000
MIB = 1024 * 1024
_DPI = 200
# Distinct pages to draw the scan's pages from (each page is turned a little differently).
_SOURCE_PAGES = 24


def big_scan(pages: int, target_bytes: int) -> bytes:
    """A scanned PDF of ``pages`` greyscale JPEG pages, about ``target_bytes`` in all."""
    sources = _source_pages()

    def page_image(i: int) -> Image.Image:
        # Each page its own skew (-1 to 1 degree): no two pages are the same image, which
        # the PDF would store once.
        skew = ((i * 37) % 101 - 50) / 50
        return sources[i % len(sources)].rotate(
            skew, fillcolor=250, resample=Image.Resampling.BILINEAR
        )

    quality = _quality_for([page_image(i) for i in range(len(sources))], target_bytes // pages)
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=False)
    for i in range(pages):
        page = page_image(i)
        jpeg = io.BytesIO()
        page.save(jpeg, format="JPEG", quality=quality)
        pdf.add_page()
        pdf.image(jpeg, x=0, y=0, w=pdf.w, h=pdf.h)
    return bytes(pdf.output())


def _source_pages() -> list[Image.Image]:
    images: list[Image.Image] = []
    for contract in sample_contracts(_SOURCE_PAGES // 3):
        document = pdfium.PdfDocument(contract_pdf(contract.text))
        for page in document:
            bitmap = page.render(scale=_DPI / 72, grayscale=True)
            images.append(bitmap.to_pil().convert("L").filter(ImageFilter.GaussianBlur(0.6)))
            page.close()
        document.close()
    return images[:_SOURCE_PAGES]


def _quality_for(images: list[Image.Image], page_bytes: int) -> int:
    """The best JPEG quality whose pages stay within ``page_bytes`` on average (a binary
    search: a page's size grows with the quality)."""
    low, high = 5, 98
    while low < high:
        quality = (low + high + 1) // 2
        sizes = []
        for image in images:
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=quality)
            sizes.append(len(buffer.getvalue()))
        if sum(sizes) / len(sizes) <= page_bytes:
            low = quality
        else:
            high = quality - 1
    return low


def _rss(pid: int) -> int:
    """The process' RSS; 0 once it has exited (a Tesseract run may end between looks)."""
    try:
        return rss_bytes(pid)
    except (OSError, RuntimeError):
        return 0


def _pages_read(bench: Bench, document_id: str) -> int:
    return int(
        bench.scalar(
            "SELECT count(*) FROM document_page WHERE document_id = %s AND finished_at IS NOT NULL",
            document_id,
        )
    )


def measure(data: bytes, pages: int, read_pages: int) -> dict[str, Any]:
    with bench_stack(interactive_concurrency=1, batch_concurrency=1, latency_ms="0:0") as bench:
        db = Database(bench.database_url)
        with db.transaction() as tx:
            put_file(tx, DEFAULT_TENANT, "big-scan", io.BytesIO(data), "pdf")
        db.close()
        worker = bench.stack.process("worker-interactive")
        pool = [pid for pid in tree_pids(worker.pid) if pid != worker.pid]
        at_rest = {pid: rss_bytes(pid) for pid in [worker.pid, *pool]}
        run_id = bench.client.extract("big-scan", idempotency_key="big-scan")["run_id"]
        started, samples = time.monotonic(), 0
        largest = dict.fromkeys(at_rest, 0)
        tesseract = 0  # the largest Tesseract process seen (a child of the pool process)
        while (read := _pages_read(bench, "big-scan")) < read_pages:
            for pid in tree_pids(worker.pid):
                rss = _rss(pid)
                if pid in largest:
                    largest[pid] = max(largest[pid], rss)
                else:
                    tesseract = max(tesseract, rss)
            samples += 1
            if bench.client.run(run_id)["status"] not in ("queued", "running"):
                break
            time.sleep(0.5)
        seconds = time.monotonic() - started
        peaks = {pid: peak_rss_bytes(pid) for pid in at_rest}
        bench.client.cancel(run_id)
        wait_for(lambda: bench.client.run(run_id)["status"] == "cancelled", timeout_s=120)
    child = max((pid for pid in peaks if pid != worker.pid), key=peaks.__getitem__)
    result = {
        "file_bytes": len(data),
        "pages": pages,
        "pages_read": read,
        "seconds": round(seconds, 1),
        "pages_per_s": round(read / seconds, 3),
        "pool_rss_at_rest_mib": round(at_rest.get(child, 0) / MIB, 1),
        "pool_peak_rss_mib": round(peaks[child] / MIB, 1),
        "pool_largest_sampled_rss_mib": round(largest.get(child, 0) / MIB, 1),
        "main_peak_rss_mib": round(peaks[worker.pid] / MIB, 1),
        "samples": samples,
        "tesseract_largest_sampled_rss_mib": round(tesseract / MIB, 1),
    }
    print(
        f"{len(data) / MB:.1f} MB, {pages} pages: {read} read in {seconds:.0f} s "
        f"({result['pages_per_s']} pages/s); pool process RSS {result['pool_rss_at_rest_mib']} "
        f"MiB at rest, peak {result['pool_peak_rss_mib']} MiB; main process peak "
        f"{result['main_peak_rss_mib']} MiB; Tesseract up to "
        f"{result['tesseract_largest_sampled_rss_mib']} MiB"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--megabytes", type=float, default=50)
    parser.add_argument(
        "--read-pages", type=int, default=None, help="stop after this many pages (default: all)"
    )
    args = parser.parse_args()
    made = time.monotonic()
    data = big_scan(args.pages, int(args.megabytes * MB))
    print(
        f"scan made: {len(data) / MB:.1f} MB, {args.pages} pages, {time.monotonic() - made:.0f} s"
    )
    result = measure(data, args.pages, args.read_pages or args.pages)
    markdown = f"""# A worker reading a big scan

`python -m bench.worker_memory --pages {args.pages} --megabytes {args.megabytes:g}`: a
{result["file_bytes"] / MB:.1f} MB scanned PDF of {args.pages} greyscale JPEG pages
({_DPI} dpi), stored in PostgreSQL, read by one worker process (prefork, concurrency 1) with
Tesseract, page by page.

| | |
|---|---|
| pages read | {result["pages_read"]} in {result["seconds"]} s ({result["pages_per_s"]} pages/s) |
| pool process RSS at rest | {result["pool_rss_at_rest_mib"]} MiB |
| pool process peak RSS (VmHWM) | {result["pool_peak_rss_mib"]} MiB |
| largest RSS sampled (every 0.5 s) | {result["pool_largest_sampled_rss_mib"]} MiB |
| worker main process peak RSS | {result["main_peak_rss_mib"]} MiB |
| largest Tesseract process sampled (a child of the pool process, one page) | {result["tesseract_largest_sampled_rss_mib"]} MiB |
"""
    path = write_report("worker-memory", markdown, result)
    print(f"report: {path}")


if __name__ == "__main__":
    main()
