"""Documents as people have them, through the API as a process, real workers, PostgreSQL and
Tesseract: each format ends `done` with the fields of its text, a contract scanned sideways
with the fields of the upright scan; a scan that could not be read ends in review, naming
its pages; a worker killed during OCR redoes only the page in flight; every bad file fails
with its own kind, and the API refuses what it can see at upload."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from docpipe.settings import Settings
from docpipe.state import documents
from docpipe.state.db import Database
from docpipe.state.documents import ORIGINAL_CHUNK_BYTES
from docpipe_dev import word_xml
from docpipe_dev.hostile import pdf as hostile_pdf
from docpipe_dev.hostile import word as hostile_word
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.sample_files import contract_pdf_with_photos, contract_scan
from docpipe_dev.samples import sample_contracts
from tests.support import document_files as files
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "word"
ENDED = ("done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded")
CONTRACT = sample_contracts(3)[2]
# OCR may misread a character of a name or a number; the other formats are exact. At most
# this many of the contract's fields may differ from the text version's after OCR.
OCR_FIELD_TOLERANCE = 1
SLOW_OCR = {"DOCPIPE_OCR_PAGE_TIMEOUT_S": "25"}
ONE_PAGE_CONTRACT = (
    "SERVICES AGREEMENT\n\nThis Services Agreement is made between Northwind Traders Ltd and "
    "Contoso Analytics GmbH.\n\n1. TERM\n\nThe term of this Agreement is twenty four months.\n\n"
    "2. FEES\n\nThe Customer shall pay the invoices of the Supplier within 30 days."
)


def upload(api: str, document_id: str, data: bytes, content_type: str) -> httpx.Response:
    return httpx.put(
        f"{api}/documents/{document_id}",
        content=data,
        headers={"Content-Type": content_type},
        timeout=30,
    )


def start_run(api: str, document_id: str) -> str:
    started = httpx.post(
        f"{api}/documents/{document_id}/extract",
        headers={"Idempotency-Key": document_id},
        timeout=10,
    )
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def final_status(api: str, run_id: str, timeout_s: float = 240) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(f"{api}/runs/{run_id}", timeout=10).json()
        return body if body["status"] in ENDED else None

    found: dict[str, Any] = wait_until(ended, timeout_s=timeout_s, every_s=0.3)
    return found


def differing(fields: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    return sorted(k for k in expected.keys() | fields.keys() if fields.get(k) != expected.get(k))


def test_each_format_ends_done_with_the_fields_of_its_text(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    # A sideways page is read twice (as it lies, then turned): on a loaded machine that may
    # take the default share of the soft time limit (half of 30 s here).
    start_worker("interactive", concurrency=2, **SLOW_OCR)
    start_beat()
    # Whatever Content-Type a client sends with a file, its bytes say what it is.
    sent_as = {
        "text": "text/plain",
        "pdf": "application/octet-stream",
        "docx": "application/pdf",
        "scan": "application/pdf",
        "sideways": "application/pdf",
    }
    runs = {}
    for fmt, content_type in sent_as.items():
        # Fed into the scanner on its side: its lines run up the page.
        data = (
            contract_scan(CONTRACT.text, turned=270)
            if fmt == "sideways"
            else files.contract_as(fmt, CONTRACT.text)
        )
        stored = upload(api, f"contract-{fmt}", data, content_type)
        assert stored.status_code == 201, stored.text
        assert stored.json()["format"] == (fmt if fmt in ("text", "pdf", "docx") else "pdf")
        runs[fmt] = start_run(api, f"contract-{fmt}")
    results = {fmt: final_status(api, run_id) for fmt, run_id in runs.items()}
    for fmt, status in results.items():
        assert status["status"] == "done", (fmt, status["error"])
    fields = {fmt: s["result"]["extract_fields"]["fields"] for fmt, s in results.items()}
    assert fields["text"] == CONTRACT.expected
    assert fields["pdf"] == fields["text"]
    assert fields["docx"] == fields["text"]
    assert len(differing(fields["scan"], fields["text"])) <= OCR_FIELD_TOLERANCE, differing(
        fields["scan"], fields["text"]
    )
    # Read upright, the sideways scan finds what the upright one does.
    assert fields["sideways"] == fields["scan"], differing(fields["sideways"], fields["scan"])
    extraction = {fmt: s["result"]["extract_text"] for fmt, s in results.items()}
    assert (extraction["text"]["format"], extraction["text"]["pages"]) == ("text", 1)
    assert extraction["pdf"]["pages"] >= 3 and extraction["pdf"]["ocr_pages"] == 0
    assert extraction["scan"]["ocr_pages"] == extraction["scan"]["pages"] >= 3
    assert extraction["scan"]["ocr_confidence"] > 80
    # GET /documents reports what extraction found.
    scan = httpx.get(f"{api}/documents/contract-scan", timeout=10).json()
    assert (scan["format"], scan["extracted"], scan["ocr"]) == ("pdf", True, True)
    assert scan["pages"] == scan["ocr_pages"] == extraction["scan"]["pages"]
    assert (scan["rotated_pages"], scan["warnings"]) == ([], [])
    sideways = httpx.get(f"{api}/documents/contract-sideways", timeout=10).json()
    turned = [{"page": n, "degrees": 90} for n in range(1, sideways["pages"] + 1)]
    assert sideways["rotated_pages"] == extraction["sideways"]["rotated_pages"] == turned
    docx = httpx.get(f"{api}/documents/contract-docx", timeout=10).json()
    assert (docx["format"], docx["extracted"], docx["ocr"], docx["warnings"]) == (
        "docx",
        True,
        False,
        [],
    )
    # Every page was read once; a text layer's score is kept with the page, a scan has none.
    assert scalar(db, "SELECT max(attempts) FROM document_page") == 1
    assert (
        scalar(
            db, "SELECT min(text_layer_score) FROM document_page WHERE document_id = 'contract-pdf'"
        )
        > 0.95
    )
    assert (
        scalar(
            db,
            "SELECT count(text_layer_score) FROM document_page WHERE document_id = 'contract-scan'",
        )
        == 0
    )


def test_a_scan_that_could_not_be_read_ends_in_review_naming_its_pages(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_worker("interactive", concurrency=1, **SLOW_OCR)
    start_beat()
    # Out of focus past reading: OCR finds shapes, not words.
    blurred = contract_scan(ONE_PAGE_CONTRACT, blurred=True)
    assert upload(api, "blurred", blurred, "application/pdf").status_code == 201
    status = final_status(api, start_run(api, "blurred"))
    assert status["status"] == "needs_review", status
    assert (
        "poor_extraction: 1 of 1 pages could not be read well: page 1 (low OCR confidence"
        in (status["error"])
    )
    warnings = httpx.get(f"{api}/documents/blurred", timeout=10).json()["warnings"]
    low = next(w for w in warnings if w["kind"] == "low_ocr_confidence")
    assert (low["page"], low["value"] < 60) == (1, True)
    assert low["message"] == f"page 1: low OCR confidence ({low['value']:g})"


def test_a_worker_killed_during_ocr_redoes_only_the_page_in_flight(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_beat()
    worker = start_worker("interactive", concurrency=1)
    scan = files.contract_as("scan", CONTRACT.text, seed=3)
    assert upload(api, "scan", scan, "application/pdf").status_code == 201
    run_id = start_run(api, "scan")

    def finished() -> int:
        return int(scalar(db, "SELECT count(*) FROM document_page WHERE finished_at IS NOT NULL"))

    wait_until(lambda: finished() >= 2, timeout_s=120, every_s=0.05)
    worker.kill_group()  # SIGKILL in the middle of OCR: pages read, maybe one in flight
    read_before = finished()
    in_flight = scalar(db, "SELECT count(*) FROM document_page WHERE finished_at IS NULL")
    assert in_flight <= 1
    start_worker("interactive", concurrency=1)
    status = final_status(api, run_id)
    assert status["status"] == "done", status["error"]
    pages = status["result"]["extract_text"]["pages"]
    assert read_before < pages, "the kill came before the last page"
    with db.session() as s:
        attempts = [
            r["attempts"]
            for r in s.conn.execute(b"SELECT attempts FROM document_page ORDER BY page").fetchall()
        ]
    # Each page was read once, but the one on Tesseract when the worker died: twice.
    assert len(attempts) == pages
    assert sorted(attempts) == [1] * (pages - in_flight) + [2] * in_flight


def test_a_50_mb_pdf_goes_through_upload_extraction_and_the_pipeline(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_worker("interactive", concurrency=1)
    start_beat()
    big = contract_pdf_with_photos(CONTRACT.text, Settings().max_pdf_bytes)
    assert len(big) > 49_000_000
    stored = httpx.put(
        f"{api}/documents/big",
        content=big,
        timeout=120,
        headers={"Content-Type": "application/pdf"},
    )
    assert stored.status_code == 201, stored.text
    assert (stored.json()["size_bytes"], stored.json()["format"]) == (len(big), "pdf")
    status = final_status(api, start_run(api, "big"))
    assert status["status"] == "done", status["error"]
    assert status["result"]["extract_fields"]["fields"] == CONTRACT.expected
    assert status["result"]["extract_text"]["ocr_pages"] == 0


# (the kind it fails with, a name, the file): each is uploaded and run on a real worker.
BAD_FILES: list[tuple[str, str, Callable[[], bytes]]] = [
    ("encrypted", "encrypted", files.encrypted_pdf),
    ("corrupt", "truncated", files.truncated_pdf),
    ("format_mismatch", "pdf-header-on-text", files.pdf_header_on_text),
    ("too_many_pages", "three-pages", lambda: files.pdf_of_pages(["1. ONE\nText."] * 3)),
    ("decompression_bomb", "hidden-bomb", files.docx_hiding_a_bomb),
    ("too_complex", "ten-thousand-text-boxes", hostile_word.many_text_boxes),
    ("too_complex", "tables-a-thousand-deep", hostile_word.deeply_nested_tables),
    ("too_complex", "a-span-of-a-billion-columns", hostile_word.huge_grid_span),
    ("too_much_text", "merged-down-five-thousand-rows", hostile_word.merged_down),
    ("page_too_large", "ten-km-square-page", hostile_pdf.huge_page),
    ("empty_text", "blank", files.blank_pdf),
]


def test_every_bad_file_fails_with_its_own_kind_and_leaves_nothing_running(
    db: Database,
    broker: Any,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    env = {"DOCPIPE_MAX_DOCUMENT_PAGES": "2"}
    api = start_api(**env)
    start_beat(**env)
    worker = start_worker("interactive", concurrency=2, **env)
    runs = {}
    for kind, name, make in BAD_FILES:
        stored = upload(api, f"bad-{name}", make(), "application/octet-stream")
        assert stored.status_code == 201, (name, stored.text)
        runs[name] = (kind, start_run(api, f"bad-{name}"))
    for name, (kind, run_id) in runs.items():
        status = final_status(api, run_id)
        assert (status["status"], status["current_step"]) == ("failed", None), (name, status)
        assert status["error"].startswith(f"{kind}: "), (name, status["error"])
        assert status["steps"][0]["attempt"] == 1, "permanent: never tried again"
    assert worker.alive(), "no bad file crashes a worker"
    assert scalar(db, "SELECT count(*) FROM pipeline_step_result WHERE status = 'running'") == 0
    assert scalar(db, "SELECT count(*) FROM document_page WHERE finished_at IS NULL") == 0
    assert scalar(db, "SELECT count(*) FROM llm_call_log") == 0, "no model was asked"
    assert broker.llen("llm_interactive") == 0


@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        (
            b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,
            "image/png",
            422,
            "the PNG cannot be read: corrupt: the image cannot be decoded (its header is damaged)",
        ),
        (b"\x00\x01binary", "application/octet-stream", 415, "send PDF, Word (DOCX), PNG"),
        (files.not_a_docx_zip(), "application/zip", 415, "send PDF, Word (DOCX), PNG"),
        (files.docx_declaring_a_bomb(), "application/octet-stream", 422, "decompression_bomb"),
    ],
    ids=["damaged-image", "binary", "zip-without-word-document", "declared-bomb"],
)
def test_files_the_api_can_judge_at_upload_are_refused(
    make_api_client: Callable[..., TestClient],
    db: Database,
    body: bytes,
    content_type: str,
    status: int,
    message: str,
) -> None:
    client = make_api_client()
    response = client.put("/documents/bad", content=body, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text
    assert message in response.json()["detail"]
    assert scalar(db, "SELECT count(*) FROM document") == 0


def test_each_format_is_held_to_its_own_size_limit_with_413_naming_it(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(max_document_bytes=100, max_pdf_bytes=30_000, max_docx_bytes=8_000)
    pdf, scan = files.contract_as("pdf", CONTRACT.text), files.contract_as("scan", CONTRACT.text)
    docx = (FIXTURES / "features.docx").read_bytes()
    assert len(pdf) < 30_000 < len(scan) and len(docx) > 8_000
    # A PDF or DOCX far over the text limit is stored: text's limit is not theirs.
    small_docx = word_xml.word_file(word_xml.p("1. TERM"))
    for name, data in (("pdf", pdf), ("small-docx", small_docx)):
        assert client.put(f"/documents/{name}", content=data).status_code == 201, name
    cases = [
        (scan, "30000 bytes for a PDF (DOCPIPE_MAX_PDF_BYTES)"),
        (docx, "8000 bytes for a DOCX (DOCPIPE_MAX_DOCX_BYTES)"),
        (b"x" * 101, "100 bytes for a text (DOCPIPE_MAX_DOCUMENT_BYTES)"),
    ]
    for data, limit in cases:
        # Declared: refused from Content-Length; chunked: as soon as the body passes it.
        for body in (data, iter([data[i : i + 4096] for i in range(0, len(data), 4096)])):
            refused = client.put(
                "/documents/big", content=body, headers={"Content-Type": "text/plain"}
            )
            assert refused.status_code == 413, limit
            assert limit in refused.json()["detail"]
    assert scalar(db, "SELECT count(*) FROM document") == 2
    assert scalar(db, "SELECT count(*) FROM document WHERE id = 'big'") == 0


def test_a_file_is_stored_in_chunks_and_read_back_whole(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    scan = files.contract_as("scan", CONTRACT.text)
    # Past the chunk size, with an odd tail: the scan's bytes, then padding PDF readers skip.
    data = scan + b"\n%" + bytes(range(256)) * (2 * ORIGINAL_CHUNK_BYTES // 256 + 7)
    assert client.put("/documents/big-scan", content=data).status_code == 201
    query = b"SELECT octet_length(data) AS n FROM document_original_chunk ORDER BY seq"
    with db.session() as s:
        sizes = [row["n"] for row in s.conn.execute(query)]
    assert sizes[:-1] == [ORIGINAL_CHUNK_BYTES] * 2 and sum(sizes) == len(data)
    assert copied(db, "big-scan") == data
    body = client.get("/documents/big-scan").json()
    assert (body["size_bytes"], body["format"]) == (len(data), "pdf")
    # A file stored before migration 0020 kept its bytes in document.original.
    with db.transaction() as tx:
        tx.conn.execute(
            b"INSERT INTO document (tenant_id, id, content, content_sha256, "
            b"size_bytes, format, original) VALUES ('default', 'old', '', 'x', "
            b"%s, 'pdf', %s)",
            (len(scan), scan),
        )
    assert copied(db, "old") == scan


def copied(db: Database, document_id: str) -> bytes:
    """The document's bytes as a worker copies them out (a chunk, or a slice, per query)."""
    file = io.BytesIO()
    documents.copy_original(db, "default", document_id, file)
    return file.getvalue()


def test_the_same_file_again_is_a_no_op_and_other_bytes_a_conflict(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    pdf = files.contract_as("pdf", CONTRACT.text)
    first = client.put("/documents/c", content=pdf, headers={"Content-Type": "application/pdf"})
    again = client.put("/documents/c", content=pdf, headers={"Content-Type": "application/pdf"})
    assert (first.status_code, again.status_code) == (201, 200)
    body = first.json()
    assert (body["format"], body["extracted"], body["pages"], body["ocr"]) == (
        "pdf",
        False,
        None,
        None,
    )
    other = client.put(
        "/documents/c",
        content=files.contract_as("docx", CONTRACT.text),
        headers={"Content-Type": "application/pdf"},
    )
    assert other.status_code == 409
