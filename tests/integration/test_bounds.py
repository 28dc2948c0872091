"""Bounds on what a tenant (or anyone who can reach the API) may make docpipe hold, pay or
keep open, tried against a real uvicorn process with real PostgreSQL and Redis: big batches,
event streams, request floods. (bench/api_memory.py measures the memory side in detail.)"""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest
import redis
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe_dev.big_requests import (
    Answer,
    batch_body_chunks,
    batch_body_length,
    peak_rss_bytes,
    post_in_chunks,
    reset_peak_rss,
)
from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess, api_argv
from tests.factories import scalar
from tests.processes import ProcessFactory, wait_until

MB = 1_000_000
MIB = 1024 * 1024
# The chart's memory limit of an API container (charts/docpipe values.yaml, api.resources).
API_MEMORY_LIMIT = 512 * MIB


@pytest.fixture
def api_process(start_process: ProcessFactory) -> Callable[..., tuple[str, ManagedProcess]]:
    """A real uvicorn process of the API; returns its URL and the process."""

    def start(**env: str) -> tuple[str, ManagedProcess]:
        port = free_port()
        proc = start_process(
            "api", api_argv(host="127.0.0.1", port=port), "Uvicorn running on", **env
        )
        return f"http://127.0.0.1:{port}", proc

    return start


# --- big batches --------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_60_mb_batch_of_oversized_documents_is_refused_without_being_held(
    api_process: Callable[..., tuple[str, ManagedProcess]],
    db: Database,
    broker: redis.Redis,
    declared: bool,
) -> None:
    url, api = api_process()  # the default caps: 32 MB a body, 1 MB a document
    documents, text_bytes = 30, 2 * MB
    length = batch_body_length(documents, text_bytes)
    assert length > 60 * MB
    reset_peak_rss(api.pid)
    answer = post_in_chunks(
        url,
        "/batches",
        batch_body_chunks(documents, text_bytes),
        content_length=length if declared else None,
    )
    assert answer.status == 413, answer.body
    assert b"larger than the limit of 32000000 bytes" in answer.body
    # Refused from Content-Length before reading, or at the cap while reading: the rest of
    # the body is never received, and the process never held more than a fraction of it.
    assert answer.sent_bytes < (1 if declared else 2) * 32 * MB
    assert peak_rss_bytes(api.pid) < API_MEMORY_LIMIT / 2
    assert scalar(db, "SELECT count(*) FROM document") == 0
    assert scalar(db, "SELECT count(*) FROM batch") == 0


def test_an_oversized_document_inside_a_batch_under_the_cap_is_refused_by_its_index(
    api_process: Callable[..., tuple[str, ManagedProcess]], db: Database, broker: redis.Redis
) -> None:
    url, api = api_process()
    documents, text_bytes = 15, 2 * MB  # 30 MB: under the body cap, every text over 1 MB
    reset_peak_rss(api.pid)
    answer = post_in_chunks(
        url,
        "/batches",
        batch_body_chunks(documents, text_bytes),
        content_length=batch_body_length(documents, text_bytes),
    )
    assert answer.status == 413, answer.body
    assert b"documents[0] is larger than the limit of 1000000 bytes per document" in answer.body
    assert peak_rss_bytes(api.pid) < API_MEMORY_LIMIT / 2
    assert scalar(db, "SELECT count(*) FROM document") == 0
    assert scalar(db, "SELECT count(*) FROM batch") == 0


def test_a_process_holding_its_batch_bodies_answers_503_to_one_more(
    api_process: Callable[..., tuple[str, ManagedProcess]], db: Database, broker: redis.Redis
) -> None:
    url, _ = api_process(DOCPIPE_MAX_BATCH_BODIES_IN_FLIGHT="1")
    # A client that sends half a body and stalls holds the process' one slot, so another
    # batch is told to come back, and nothing of it is read or stored.
    stalled, busy = wait_until(lambda: _stall_then_post(url), timeout_s=30)
    with stalled:
        assert busy.status == 503, busy.body
        assert int(busy.headers["retry-after"]) >= 1
        assert b"as many batches as it may hold in memory" in busy.body
        assert scalar(db, "SELECT count(*) FROM batch") == 0
    # Once the stalled client is gone, its slot is free again.
    accepted = wait_until(lambda: _post_one(url, unless=503), timeout_s=30)
    assert accepted.status == 202, accepted.body
    assert scalar(db, "SELECT count(*) FROM batch") == 1


def _stall_then_post(url: str) -> tuple[socket.socket, Answer] | None:
    """A stalled batch, and the answer to one more; None (and the stalled client gone) if
    the second came first and took the slot, or the stalled one was answered."""
    stalled = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=30)
    stalled.sendall(
        b"POST /batches HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (15, b'{"documents": [')
    )
    answer = _post_one(url, unless=None)
    if answer is not None and answer.status == 503:
        stalled.setblocking(False)
        try:
            stalled.recv(1)
        except BlockingIOError:  # no answer: the stalled request holds the slot
            stalled.setblocking(True)
            return stalled, answer
    stalled.close()
    return None


def _post_one(url: str, *, unless: int | None) -> Answer | None:
    answer = post_in_chunks(url, "/batches", [b'{"documents": [{"text": "x"}]}'])
    return None if answer.status == unless else answer


def test_texts_inside_a_batch_are_held_to_the_document_limit_in_utf8_bytes(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(max_document_bytes=100)
    # 60 characters, 120 bytes: over the limit although shorter than it in characters.
    body = {"documents": [{"text": "fits"}, {"id": "accents", "text": "é" * 60}]}
    refused = client.post("/batches", json=body)
    assert refused.status_code == 413, refused.text
    assert refused.json()["detail"] == (
        "documents[1] ('accents') is larger than the limit of 100 bytes per document; "
        "nothing was stored"
    )
    assert client.post("/batches", json={"documents": [{"text": "é" * 50}]}).status_code == 202
    assert scalar(db, "SELECT count(*) FROM document") == 1
