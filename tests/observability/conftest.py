"""Fixtures of the observability tests: the API as a real uvicorn process, and a tiny
document corpus to push through the stack."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from docpipe_dev.localstack import free_port
from docpipe_dev.processes import api_argv
from docpipe_dev.samples import sample_contracts
from tests.support.processes import ProcessFactory

CONTRACTS = sample_contracts(8)


@pytest.fixture
def start_api(start_process: ProcessFactory) -> Callable[..., str]:
    """Start ``uvicorn docpipe_api.main:app``; returns its base URL."""

    def start(**env: str) -> str:
        port = free_port()
        start_process(
            "api", api_argv(host="127.0.0.1", port=port), "Application startup complete", **env
        )
        return f"http://127.0.0.1:{port}"

    return start


def extract(api: str, document_id: str, text: str) -> str:
    """Store a document and start its interactive run; returns the run id."""
    stored = httpx.put(
        f"{api}/documents/{document_id}",
        content=text.encode(),
        headers={"Content-Type": "text/plain"},
        timeout=10,
    )
    assert stored.status_code in (200, 201), stored.text
    started = httpx.post(
        f"{api}/documents/{document_id}/extract",
        headers={"Idempotency-Key": document_id},
        timeout=10,
    )
    assert started.status_code == 202, started.text
    run_id: str = started.json()["run_id"]
    return run_id
