"""Evidence on the page: a PDF's pages as images (GET /documents/{id}/pages/{n}: rendered
upright once, kept, bounded in pixels; clear 4xx for what has no image) and each value's
quote boxed on them in GET /runs/{id}, for a text layer and for a scan fed in sideways.
The boxes are checked against the image itself: Tesseract reads the quote's words inside
them. Real PostgreSQL, Redis, workers, Tesseract; the fake provider."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from docpipe.extraction.ocr import read_image
from docpipe.state.db import Database
from docpipe_dev.hostile import pdf as hostile_pdf
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.sample_files import contract_docx, contract_pdf, contract_scan
from docpipe_dev.samples import sample_contracts
from tests.support.factories import extract_text, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = sample_contracts(2)[1]
ENDED = ("done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded")
PDF = "application/pdf"


def put(client: TestClient, document_id: str, data: bytes, content_type: str = PDF) -> None:
    stored = client.put(
        f"/documents/{document_id}", content=data, headers={"Content-Type": content_type}
    )
    assert stored.status_code == 201, stored.text


def test_a_pdf_page_image_is_rendered_once_upright_and_bounded(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(page_image_max_pixels=500_000)
    put(client, "contract", contract_pdf(CONTRACT.text))
    not_read = client.get("/documents/contract/pages/1")
    assert not_read.status_code == 409, not_read.text
    assert "not read yet" in not_read.json()["detail"]
    extract_text(db, client.post("/documents/contract/extract").json()["run_id"])
    pages = client.get("/documents/contract").json()["pages"]

    first = client.get("/documents/contract/pages/2")
    assert (first.status_code, first.headers["content-type"]) == (200, "image/png")
    image = Image.open(io.BytesIO(first.content))
    assert image.width * image.height <= 500_000
    assert image.height > image.width  # A4, upright
    again = client.get("/documents/contract/pages/2")
    assert again.content == first.content
    assert scalar(db, "SELECT count(*) FROM document_page_image") == 1, "rendered once"

    past = client.get(f"/documents/contract/pages/{pages + 1}")
    assert past.status_code == 404
    assert past.json()["detail"] == (
        f"document 'contract' has {pages} page(s): there is no page {pages + 1}"
    )
    assert client.get("/documents/contract/pages/0").status_code == 422


@pytest.mark.parametrize(
    ("content", "content_type", "kind"),
    [
        (CONTRACT.text.encode(), "text/plain", "text"),
        (contract_docx(CONTRACT.text), PDF, "docx"),
    ],
    ids=["text", "docx"],
)
def test_text_and_word_documents_have_no_page_images(
    make_api_client: Callable[..., TestClient], content: bytes, content_type: str, kind: str
) -> None:
    client = make_api_client()
    put(client, "doc", content, content_type)
    refused = client.get("/documents/doc/pages/1")
    assert refused.status_code == 404
    assert refused.json()["detail"].startswith(f"document 'doc' is a {kind} document: only a PDF")


def finished_run(api: str, document_id: str, data: bytes) -> dict[str, Any]:
    stored = httpx.put(
        f"{api}/documents/{document_id}", content=data, headers={"Content-Type": PDF}, timeout=30
    )
    assert stored.status_code == 201, stored.text
    run_id = httpx.post(f"{api}/documents/{document_id}/extract", timeout=10).json()["run_id"]

    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(f"{api}/runs/{run_id}", timeout=10).json()
        return body if body["status"] in ENDED else None

    run: dict[str, Any] = wait_until(ended, timeout_s=240, every_s=0.3)
    return run


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def read_in_boxes(image: Image.Image, boxes: list[dict[str, Any]]) -> str:
    """What Tesseract reads inside the boxes on the page image (each line apart)."""
    lines = []
    for box in boxes:
        scale = image.width / box["page_width"]
        edges = (box["left"], box["top"], box["right"], box["bottom"])
        left, top, right, bottom = (int(v * scale) for v in edges)
        crop = image.crop((left - 2, top - 2, right + 2, bottom + 2))
        big = crop.resize((crop.width * 3, crop.height * 3)).convert("L")
        buffer = io.BytesIO()
        big.save(buffer, format="PNG")
        lines.append(read_image(buffer.getvalue(), language="eng", dpi=300, timeout_s=30).text)
    return "\n".join(lines)


@pytest.mark.parametrize("fmt", ["pdf", "sideways-scan"])
def test_each_quote_is_boxed_where_it_stands_on_the_page_image(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
    fmt: str,
) -> None:
    api = start_api()
    start_worker("interactive", concurrency=1, DOCPIPE_OCR_PAGE_TIMEOUT_S="25")
    start_beat()
    data = contract_pdf(CONTRACT.text) if fmt == "pdf" else contract_scan(CONTRACT.text, turned=90)
    run = finished_run(api, "contract", data)
    assert run["status"] == "done", run["error"]
    values = run["values"]
    assert values and all(v["supported"] and v["boxes"] for v in values)
    for value in values:
        for box in value["boxes"]:
            assert 0 <= box["left"] < box["right"] <= box["page_width"], value
            assert 0 <= box["top"] < box["bottom"] <= box["page_height"], value
        # Quoted on one page (the box of its start is on the value's page).
        assert value["boxes"][0]["page"] == value["page"]
    images: dict[int, Image.Image] = {}
    # A long quote (several lines) and two short ones: what stands in their boxes on the
    # page image is the quote.
    chosen = sorted(
        (v for v in values if len(words(v["quote"])) >= 3), key=lambda v: len(v["quote"])
    )
    for value in [chosen[-1], chosen[0], chosen[len(chosen) // 2]]:
        page = value["boxes"][0]["page"]
        if page not in images:
            png = httpx.get(f"{api}/documents/contract/pages/{page}", timeout=60)
            assert png.status_code == 200, png.text
            images[page] = Image.open(io.BytesIO(png.content))
        boxes = [b for b in value["boxes"] if b["page"] == page]
        wanted = words(value["quote"])
        seen = words(read_in_boxes(images[page], boxes))
        assert len(wanted & seen) >= 0.7 * len(wanted), (value["quote"], seen)
    if len(chosen[-1]["quote"]) > 150:
        assert len(chosen[-1]["boxes"]) >= 2, "a quote over several lines has a box per line"


def test_a_page_too_large_to_draw_is_refused_and_the_refusal_remembered(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    put(client, "ten-km", hostile_pdf.drawn_too_large())
    extract_text(db, client.post("/documents/ten-km/extract").json()["run_id"])
    for _ in range(2):
        refused = client.get("/documents/ten-km/pages/1")
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"].startswith("page_too_large: page 1 is 720000 x 720000")
        assert "DOCPIPE_PAGE_IMAGE_MAX_PIXELS" in refused.json()["detail"]
    remembered = scalar(db, "SELECT error_kind FROM document_page_image WHERE page = 0")
    assert remembered == "page_too_large"


def test_a_page_slow_to_draw_is_drawn_once_for_everyone_who_asks_and_remembered(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    # One heavy request at a time: without one render for all, the others would get 503.
    client = make_api_client(pdf_page_timeout_s=2, max_heavy_requests=1)
    put(client, "slow", hostile_pdf.slow_to_render())
    extract_text(db, client.post("/documents/slow/extract").json()["run_id"])
    assert client.get("/documents/slow").json()["pages"] == 1, "its text layer read at once"
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: client.get("/documents/slow/pages/1"), range(8)))
    for answer in answers:
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"] == (
            "too_slow: could not render page 1 within 2 s (DOCPIPE_PDF_PAGE_TIMEOUT_S)"
        )
    assert scalar(db, "SELECT error_kind FROM document_page_image WHERE page = 0") == "too_slow"
    again = client.get("/documents/slow/pages/1")
    assert again.json() == answers[0].json(), "the remembered failure, not another render"

    # Two other pages at once: one is drawn, the other refused at once (no queue).
    for name in ("slow-2", "slow-3"):
        put(client, name, hostile_pdf.slow_to_render())
        extract_text(db, client.post(f"/documents/{name}/extract").json()["run_id"])
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda n: client.get(f"/documents/{n}/pages/1"), ("slow-2", "slow-3")))
    assert sorted(a.status_code for a in both) == [422, 503], [a.text for a in both]
    busy = next(a for a in both if a.status_code == 503)
    assert busy.headers["Retry-After"] == "2"
    assert "DOCPIPE_MAX_HEAVY_REQUESTS=1" in busy.json()["detail"]
