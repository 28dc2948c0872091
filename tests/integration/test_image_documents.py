"""Photos and TIFFs of contracts through the API as a process, a real worker, PostgreSQL and
Tesseract: a phone's photo of a contract's first page (JPEG, slightly turned, noisy) and a
scanner's two-page TIFF end `done` with the values their pages hold, each quote boxed on its
page image; a PNG bomb and a file of another format are refused at upload, saying why."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import httpx
from PIL import Image

from docpipe.state.db import Database
from docpipe_dev.hostile.image import png_bomb
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.sample_files import contract_photo, contract_tiff
from docpipe_dev.samples import sample_contracts
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = sample_contracts(3)[2]
ENDED = ("done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded")
# What the contract's first page states (the photo's), and its first two (the TIFF's).
FIRST_PAGE = ("parties", "contract_type", "effective_date")
FIRST_TWO_PAGES = (*FIRST_PAGE, "total_value", "payment_terms_days", "term_months")
# OCR may misread a character of a name or a number (as for a scanned PDF): at most this
# many of a page's fields may differ from the contract's.
OCR_FIELD_TOLERANCE = 1


def upload(api: str, document_id: str, data: bytes, content_type: str) -> httpx.Response:
    return httpx.put(
        f"{api}/documents/{document_id}",
        content=data,
        headers={"Content-Type": content_type},
        timeout=30,
    )


def run_to_end(api: str, document_id: str) -> dict[str, Any]:
    started = httpx.post(
        f"{api}/documents/{document_id}/extract", headers={"Idempotency-Key": document_id}
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]

    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(f"{api}/runs/{run_id}", timeout=10).json()
        return body if body["status"] in ENDED else None

    found: dict[str, Any] = wait_until(ended, timeout_s=240, every_s=0.3)
    return found


def test_a_photographed_contract_and_a_two_page_tiff_end_done_with_their_values(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_worker("interactive", concurrency=2, DOCPIPE_OCR_PAGE_TIMEOUT_S="25")
    sent = {
        "photo": (contract_photo(CONTRACT.text, seed=3), "image/jpeg", "jpeg", 1, FIRST_PAGE),
        "tiff": (
            contract_tiff(CONTRACT.text, seed=3),
            "application/octet-stream",
            "tiff",
            2,
            FIRST_TWO_PAGES,
        ),
    }
    for name, (data, content_type, fmt, _, _) in sent.items():
        stored = upload(api, f"contract-{name}", data, content_type)
        assert stored.status_code == 201, stored.text
        assert stored.json()["format"] == fmt
    for name, (_, _, fmt, pages, fields) in sent.items():
        run = run_to_end(api, f"contract-{name}")
        assert run["status"] == "done", (name, run["error"])
        extracted = run["result"]["extract_text"]
        assert (extracted["format"], extracted["pages"], extracted["ocr_pages"]) == (
            fmt,
            pages,
            pages,
        )
        found = run["result"]["extract_fields"]["fields"]
        wrong = [f for f in fields if found.get(f) != CONTRACT.expected[f]]
        assert len(wrong) <= OCR_FIELD_TOLERANCE, (name, {f: found.get(f) for f in wrong})
        # Each value's quote is in the document, and boxed on its page image.
        values = {v["field"]: v for v in run["values"]}
        for field in set(fields) - set(wrong):
            assert values[field]["supported"], (name, values[field])
            assert values[field]["boxes"], (name, field)
        image = httpx.get(f"{api}/documents/contract-{name}/pages/{pages}", timeout=60)
        assert image.status_code == 200 and image.headers["content-type"] == "image/png"
        page = Image.open(io.BytesIO(image.content))
        box = values["effective_date"]["boxes"][0]
        assert box["page_height"] > box["page_width"] > 500, box  # an A4 page, in points
        assert page.height > page.width


def test_a_png_bomb_and_a_file_of_another_format_are_refused_at_upload(
    db: Database, start_api: Callable[..., str]
) -> None:
    api = start_api()
    bomb = upload(api, "bomb", png_bomb(), "image/png")
    assert bomb.status_code == 422, bomb.text
    assert "the PNG cannot be read: decompression_bomb" in bomb.json()["detail"]
    gif = upload(api, "picture", b"GIF89a" + bytes(range(256)) * 4, "image/gif")
    assert gif.status_code == 415
    assert gif.json()["detail"].startswith(
        "send PDF, Word (DOCX), PNG, JPEG or TIFF files, or UTF-8 text: a file as it is"
    )
    assert httpx.get(f"{api}/documents/bomb").status_code == 404, "nothing was stored"
