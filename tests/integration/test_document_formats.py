"""Documents as people have them, through the API as a process, real workers, PostgreSQL and
Tesseract: each format ends `done` with the fields of its text, a contract scanned sideways
with the fields of the upright scan; a scan that could not be read ends in review, naming
its pages; a worker killed during OCR redoes only the page in flight; every bad file fails
with its own kind, and the API refuses what it can see at upload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.sample_files import contract_scan
from docpipe_dev.samples import sample_contracts
from tests import document_files as files
from tests.factories import scalar
from tests.fakellm import FakeLLM
from tests.processes import wait_until

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
    return httpx.put(f"{api}/documents/{document_id}", content=data,
                     headers={"Content-Type": content_type}, timeout=30)  # fmt: skip


def start_run(api: str, document_id: str) -> str:
    started = httpx.post(f"{api}/documents/{document_id}/extract",
                         headers={"Idempotency-Key": document_id}, timeout=10)  # fmt: skip
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
    sent_as = {"text": "text/plain", "pdf": "application/octet-stream",
               "docx": "application/pdf", "scan": "application/pdf",
               "sideways": "application/pdf"}  # fmt: skip
    runs = {}
    for fmt, content_type in sent_as.items():
        # Fed into the scanner on its side: its lines run up the page.
        data = (contract_scan(CONTRACT.text, turned=270) if fmt == "sideways"
                else files.contract_as(fmt, CONTRACT.text))  # fmt: skip
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
    assert scalar(db, "SELECT min(text_layer_score) FROM document_page WHERE "
                  "document_id = 'contract-pdf'") > 0.95  # fmt: skip
    assert scalar(db, "SELECT count(text_layer_score) FROM document_page WHERE "
                  "document_id = 'contract-scan'") == 0  # fmt: skip


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
        attempts = [r["attempts"] for r in s.conn.execute(
            b"SELECT attempts FROM document_page ORDER BY page").fetchall()]  # fmt: skip
    # Each page was read once, but the one on Tesseract when the worker died: twice.
    assert len(attempts) == pages
    assert sorted(attempts) == [1] * (pages - in_flight) + [2] * in_flight


BAD_FILES: dict[str, Callable[[], bytes]] = {
    "encrypted": files.encrypted_pdf,
    "corrupt": files.truncated_pdf,
    "format_mismatch": files.pdf_header_on_text,
    "too_many_pages": lambda: files.pdf_of_pages(["1. ONE\nText."] * 3),
    "decompression_bomb": files.docx_hiding_a_bomb,
    "empty_text": files.blank_pdf,
}


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
    for kind, make in BAD_FILES.items():
        stored = upload(api, f"bad-{kind}", make(), "application/octet-stream")
        assert stored.status_code == 201, (kind, stored.text)
        runs[kind] = start_run(api, f"bad-{kind}")
    for kind, run_id in runs.items():
        status = final_status(api, run_id)
        assert (status["status"], status["current_step"]) == ("failed", None), (kind, status)
        assert status["error"].startswith(f"{kind}: "), (kind, status["error"])
        assert status["steps"][0]["attempt"] == 1, "permanent: never tried again"
    assert worker.alive(), "no bad file crashes a worker"
    assert scalar(db, "SELECT count(*) FROM pipeline_step_result WHERE status = 'running'") == 0
    assert scalar(db, "SELECT count(*) FROM document_page WHERE finished_at IS NULL") == 0
    assert scalar(db, "SELECT count(*) FROM llm_call_log") == 0, "no model was asked"
    assert broker.llen("llm_interactive") == 0


@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "image/png", 415, "PDF or DOCX"),
        (b"\x00\x01binary", "application/octet-stream", 415, "PDF or DOCX"),
        (files.not_a_docx_zip(), "application/zip", 415, "PDF or DOCX"),
        (files.docx_declaring_a_bomb(), "application/octet-stream", 422, "decompression_bomb"),
    ],
    ids=["image", "binary", "zip-without-word-document", "declared-bomb"],
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


def test_a_file_over_the_size_limit_is_refused_with_413(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(max_document_bytes=20_000)
    scan = files.contract_as("scan", CONTRACT.text)
    assert len(scan) > 20_000
    response = client.put("/documents/big", content=scan,
                          headers={"Content-Type": "application/pdf"})  # fmt: skip
    assert response.status_code == 413
    assert scalar(db, "SELECT count(*) FROM document") == 0


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
        "pdf", False, None, None)  # fmt: skip
    other = client.put("/documents/c", content=files.contract_as("docx", CONTRACT.text),
                       headers={"Content-Type": "application/pdf"})  # fmt: skip
    assert other.status_code == 409
