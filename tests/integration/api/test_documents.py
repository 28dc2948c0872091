"""Documents: stored once and never changed, bounded, refused clearly when malformed
(PUT, POST and GET /documents)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from tests.support.api import (
    MAX_DOCUMENT_BYTES,
    TEXT,
    count,
    extract,
    put_text,
)


def test_a_document_is_stored_once_and_never_changed(client: TestClient) -> None:
    first = put_text(client)
    assert first.status_code == 201, first.text
    assert first.headers["location"] == "/documents/doc-1"
    body = first.json()
    assert set(body) == {
        "id",
        "sha256",
        "size_bytes",
        "created_at",
        "format",
        "extracted",
        "pages",
        "ocr_pages",
        "ocr",
        "warnings",
        "rotated_pages",
    }
    assert (body["id"], body["size_bytes"]) == ("doc-1", len(TEXT.encode()))
    # A text is its own text: one page, no OCR, nothing to extract.
    assert (body["format"], body["extracted"], body["pages"], body["ocr"]) == (
        "text",
        True,
        1,
        False,
    )

    again = put_text(client)
    assert again.status_code == 200
    assert again.json() == body

    other = put_text(client, text="another contract")
    assert other.status_code == 409
    assert "immutable" in other.json()["detail"]

    read = client.get("/documents/doc-1")
    assert (read.status_code, read.json()) == (200, body)


def test_a_document_may_be_sent_as_json_or_under_a_new_id(client: TestClient) -> None:
    stored = client.put("/documents/doc-json", json={"text": "Привет, договор"})
    assert stored.status_code == 201
    assert stored.json()["size_bytes"] == len("Привет, договор".encode())

    created = client.post("/documents", json={"text": TEXT})
    assert created.status_code == 201
    new_id = created.json()["id"]
    assert len(new_id) == 32 and created.headers["location"] == f"/documents/{new_id}"
    assert client.get(f"/documents/{new_id}").json() == created.json()

    plain = client.post("/documents", content=b"plain", headers={"Content-Type": "text/plain"})
    assert plain.status_code == 201 and plain.json()["id"] != new_id


def test_unknown_documents_are_not_found(client: TestClient) -> None:
    response = client.get("/documents/nope")
    assert response.status_code == 404
    assert response.json() == {"detail": "document 'nope' does not exist"}
    assert client.get("/documents/nul%00byte").status_code == 404
    assert extract(client, document_id="nul%00byte").status_code == 404


def test_documents_over_the_size_limit_are_refused_with_413(
    client: TestClient, db: Database
) -> None:
    big = "x" * (MAX_DOCUMENT_BYTES + 1)
    declared = put_text(client, text=big)
    assert declared.status_code == 413
    assert str(MAX_DOCUMENT_BYTES) in declared.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies while reading
        for _ in range(10):
            yield b"y" * 500

    streamed = client.put(
        "/documents/doc-big", content=chunks(), headers={"Content-Type": "text/plain"}
    )
    assert streamed.status_code == 413
    assert client.post("/documents", json={"text": big}).status_code == 413
    assert count(db, "document") == 0


@pytest.mark.parametrize(
    "content_type",
    [None, "application/octet-stream", "text/html", "text/plain; charset=latin-1"],
)
def test_other_content_types_are_refused_with_415(
    client: TestClient, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = client.put("/documents/doc-1", content=b"text", headers=headers)
    assert response.status_code == 415
    assert "text/plain" in response.json()["detail"] or "UTF-8" in response.json()["detail"]


@pytest.mark.parametrize(
    ("content_type", "body", "message"),
    [
        ("text/plain", b"caf\xe9", "not valid UTF-8"),
        ("text/plain", b"nul\x00byte", "NUL"),
        ("application/json", b'{"txt": "a"}', "body.text: Field required"),
        ("application/json", b'{"text": "a", "x": 1}', "body.x: Extra inputs"),
        ("application/json", b'{"text": 5}', "body.text: Input should be a valid string"),
        ("application/json", b"not json", "Invalid JSON"),
        ("application/json", b'"just a string"', "body"),
    ],
)
def test_malformed_documents_are_refused_with_422(
    client: TestClient, content_type: str, body: bytes, message: str
) -> None:
    response = client.put("/documents/doc-1", content=body, headers={"Content-Type": content_type})
    assert response.status_code == 422
    assert message in response.json()["detail"]


@pytest.mark.parametrize("document_id", ["-leading-dash", "has space", "x" * 129, "semi;colon"])
def test_invalid_document_ids_are_refused_with_422(client: TestClient, document_id: str) -> None:
    response = put_text(client, document_id=document_id)
    assert response.status_code == 422
    assert "document id" in response.json()["detail"]
