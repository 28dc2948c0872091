"""Requests the API tests send, and what they count: the API tests' own helpers
(tests/integration/api/)."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi.testclient import TestClient

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state.db import Database
from tests.support.factories import scalar

EXTRACT, STEP1, STEP2, STEP3 = DOCUMENT_EXTRACT.step_names
TENANT = "default"
TEXT = "SUPPLY AGREEMENT\nPreamble.\n1. PRICE\nThe price is 100 EUR.\n"
MAX_DOCUMENT_BYTES = 2000
INTERACTIVE = "llm_interactive"


def put_text(client: TestClient, document_id: str = "doc-1", text: str = TEXT) -> httpx.Response:
    return client.put(
        f"/documents/{document_id}",
        content=text.encode(),
        headers={"Content-Type": "text/plain; charset=utf-8"},
    )


def extract(
    client: TestClient,
    document_id: str = "doc-1",
    key: str | bytes | None = None,
    **options: Any,
) -> httpx.Response:
    headers: dict[str, str | bytes] = {} if key is None else {"Idempotency-Key": key}
    return client.post(f"/documents/{document_id}/extract", json=options or None, headers=headers)


def started_run(client: TestClient, **options: Any) -> str:
    assert put_text(client).status_code in (200, 201)
    response = extract(client, **options)
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


def count(db: Database, table: str) -> int:
    return int(scalar(db, f"SELECT count(*) FROM {table}"))
