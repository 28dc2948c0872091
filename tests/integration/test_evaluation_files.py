"""An evaluation set uploaded with its files: a multipart body whose part ``items`` holds
the JSON lines and whose other parts are the PDFs, Word files and images the lines name.
Each file is stored as PUT /documents/{id} stores it, and held to the same bounds; a line
naming no part, a part no line names or a refused file is a 4xx naming it, and nothing is
stored. The API in-process on real PostgreSQL and Redis; the files made by the generators."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe_dev.hostile.image import png_bomb
from docpipe_dev.sample_files import contract_pdf
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar

CONTRACT = sample_contracts(1)[0]
PDF = contract_pdf(CONTRACT.text)
EXPECTED = {"fields": dict(CONTRACT.expected)}
NEW_SET = {"name": "contracts", "pipeline": "document_extract", "step": "extract_fields"}


def lines(*items: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(i).encode() + b"\n" for i in items)


def with_file(document_id: str, part: str) -> dict[str, Any]:
    return {"document": {"id": document_id, "file": part}, "expected": EXPECTED}


def upload(client: TestClient, items: bytes, **files: bytes) -> Any:
    parts = {"items": ("set.jsonl", items, "application/jsonl")}
    parts |= {
        name: (f"{name}.bin", body, "application/octet-stream") for name, body in files.items()
    }
    return client.post("/evaluation-sets/contracts/items", files=parts)


def test_a_set_uploaded_with_a_pdf_stores_it_as_put_documents_does(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    assert client.post("/evaluation-sets", json=NEW_SET).status_code == 201
    text_item = {"document": {"id": "c-text", "text": CONTRACT.text}, "expected": EXPECTED}
    added = upload(client, lines(with_file("c-pdf", "contract"), text_item), contract=PDF)
    assert added.status_code == 200, added.text
    assert (added.json()["version"], added.json()["items"]) == (1, 2)
    stored = client.get("/documents/c-pdf").json()
    assert (stored["format"], stored["size_bytes"]) == ("pdf", len(PDF))
    # The same bytes sent to PUT /documents/{id} again: already stored, as that route stores.
    again = client.put("/documents/c-pdf", content=PDF, headers={"Content-Type": "application/pdf"})
    assert again.status_code == 200, again.text
    assert again.json()["sha256"] == stored["sha256"]
    items = client.get("/evaluation-sets/contracts/items").json()["items"]
    assert {i["document_id"]: i["expected"] for i in items} == {
        "c-pdf": EXPECTED,
        "c-text": EXPECTED,
    }


def test_a_bad_part_or_line_is_a_4xx_naming_it_and_stores_nothing(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(max_pdf_bytes=len(PDF) + 1_000, max_evaluation_items=2)
    assert client.post("/evaluation-sets", json=NEW_SET).status_code == 201
    documents = scalar(db, "SELECT count(*) FROM document")
    good = with_file("c-pdf", "contract")

    def refused(status: int, detail: str, items: bytes, **files: bytes) -> None:
        answer = upload(client, items, **files)
        assert answer.status_code == status, answer.text
        assert detail in answer.json()["detail"]

    # A line naming a part that was not sent; the good line before it is not kept.
    refused(
        422,
        "line 2: no file part is named 'missing'",
        lines(good, with_file("c-2", "missing")),
        contract=PDF,
    )
    # A part that no line names.
    refused(422, "file parts named by no line: 'stray'", lines(good), contract=PDF, stray=PDF)
    # Files refused by the document bounds, each named by its line: a decompression bomb
    # (the image-size check), text (no file format), a PDF past DOCPIPE_MAX_PDF_BYTES.
    refused(
        422,
        "line 2: file part 'bomb'",
        lines(good, with_file("c-2", "bomb")),
        contract=PDF,
        bomb=png_bomb(),
    )
    refused(
        415,
        "line 2: file part 'notes'",
        lines(good, with_file("c-2", "notes")),
        contract=PDF,
        notes=b"plain words, no file format\n",
    )
    big = PDF + b"%" * 2_000 + b"\n"
    refused(413, "DOCPIPE_MAX_PDF_BYTES", lines(with_file("c-big", "big")), big=big)
    # More files than a set may hold items.
    three = lines(good, with_file("c-2", "b"), with_file("c-3", "c"))
    refused(422, "at most 2 files", three, contract=PDF, b=PDF, c=PDF)
    # No part called items, and a line naming a file in a body that sends none.
    no_items = client.post("/evaluation-sets/contracts/items", files={"contract": PDF})
    assert no_items.status_code == 422, no_items.text
    assert "'items'" in no_items.json()["detail"]
    plain = client.post(
        "/evaluation-sets/contracts/items",
        content=lines(good),
        headers={"Content-Type": "application/jsonl"},
    )
    assert plain.status_code == 422, plain.text
    assert plain.json()["detail"].startswith("line 1: document.file")
    now = client.get("/evaluation-sets/contracts").json()
    assert (now["version"], now["items"]) == (0, 0)
    assert scalar(db, "SELECT count(*) FROM document") == documents
