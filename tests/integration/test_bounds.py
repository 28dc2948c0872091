"""Bounds on what a tenant (or anyone who can reach the API) may make docpipe hold, pay or
keep open, tried against a real uvicorn process with real PostgreSQL and Redis: big batches,
event streams, request floods. (bench/api_memory.py measures the memory side in detail.)"""

from __future__ import annotations

import json
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key, revoke_api_key
from docpipe_api.bounds import WINDOW_S
from docpipe_api.openapi import usd_string_at_most
from docpipe_api.schemas import USD_MAX
from docpipe_dev.big_requests import (
    Answer,
    batch_body_chunks,
    batch_body_length,
    peak_rss_bytes,
    post_in_chunks,
    reset_peak_rss,
)
from docpipe_dev.localstack import LocalRedis, free_port
from docpipe_dev.processes import ManagedProcess, api_argv
from tests.support.factories import scalar
from tests.support.processes import ProcessFactory, wait_until

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
    stalled, _ = wait_until(lambda: _stall_then_post(url), timeout_s=30)
    with stalled:
        stored = scalar(db, "SELECT count(*) FROM batch")
        busy = _post_one(url, unless=None)
        assert busy is not None and busy.status == 503, busy
        assert int(busy.headers["retry-after"]) >= 1
        assert b"as many batches as it may hold in memory" in busy.body
        assert scalar(db, "SELECT count(*) FROM batch") == stored
    # Once the stalled client is gone, its slot is free again.
    accepted = wait_until(lambda: _post_one(url, unless=503), timeout_s=30)
    assert accepted.status == 202, accepted.body
    assert scalar(db, "SELECT count(*) FROM batch") == stored + 1


def _stall_then_post(url: str) -> tuple[socket.socket, Answer] | None:
    """A stalled batch, and the answer to one more; None (and the stalled client gone) if
    the second came first and took the slot (and was stored), or the stalled one was
    answered."""
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


# --- how far ahead, and how much ------------------------------------------------------------


def _stored_document(client: TestClient) -> None:
    stored = client.put("/documents/doc-1", content=b"TEXT", headers={"Content-Type": "text/plain"})
    assert stored.status_code == 201


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"start_at": "9999-12-31T23:59:59Z"},
            "too far ahead: at most 604800 s (7 days, DOCPIPE_MAX_START_DELAY_S) from now",
        ),
        (
            {"deadline_s": 8 * 86_400},
            "deadline_s=691200 is beyond the limit of 604800 s (7 days, DOCPIPE_MAX_DEADLINE_S)",
        ),
        (
            {"budget_usd": "100.01"},
            "budget_usd=100.01 is more than a run may cost: the limit "
            "is 100 (DOCPIPE_MAX_RUN_BUDGET_USD)",
        ),
    ],
)
def test_a_run_too_far_ahead_or_too_dear_is_refused_with_the_setting_named(
    make_api_client: Callable[..., TestClient],
    db: Database,
    options: dict[str, object],
    message: str,
) -> None:
    client = make_api_client()
    _stored_document(client)
    refused = client.post("/documents/doc-1/extract", json=options)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"].endswith(message)
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 0


def test_runs_within_the_bounds_start_and_runs_without_a_budget_get_the_default(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    _stored_document(client)
    soon = (datetime.now(UTC) + timedelta(days=6)).isoformat()
    for options in ({"start_at": soon}, {"deadline_s": 7 * 86_400}, {"budget_usd": 100}, {}):
        assert client.post("/documents/doc-1/extract", json=options).status_code == 202
    budgets = db_column(db, "SELECT budget_usd FROM pipeline_run ORDER BY created_at")
    assert budgets == [Decimal(1), Decimal(1), Decimal(100), Decimal(1)]


def test_batches_are_held_to_the_same_deadline_and_run_budget_bounds(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(default_run_budget_usd="0.5", max_run_budget_usd="2")
    documents = [{"text": "x"}]
    too_late = client.post("/batches", json={"documents": documents, "deadline_s": 8 * 86_400})
    assert too_late.status_code == 422, too_late.text
    assert "DOCPIPE_MAX_DEADLINE_S" in too_late.json()["detail"]
    too_dear = client.post("/batches", json={"documents": documents, "run_budget_usd": 3})
    assert too_dear.status_code == 422, too_dear.text
    assert "run_budget_usd=3 is more than a run may cost" in too_dear.json()["detail"]
    assert scalar(db, "SELECT count(*) FROM batch") == 0
    assert client.post("/batches", json={"documents": documents}).status_code == 202
    assert db_column(db, "SELECT budget_usd FROM pipeline_run") == [Decimal("0.5")]
    assert db_column(db, "SELECT run_budget_usd FROM batch") == [Decimal("0.5")]


def db_column(db: Database, sql: str) -> list[object]:
    with db.session() as s:
        return [next(iter(row.values())) for row in s.conn.execute(sql.encode()).fetchall()]


# --- requests per client address ------------------------------------------------------------


def _clear_of_a_window_boundary() -> None:
    """Start counting at least a few seconds before the next one-minute window, so a test's
    requests are counted in one window (setup, not an assertion on time)."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left < 5:
        time.sleep(left + 0.1)


def _guess() -> dict[str, str]:
    return {"Authorization": f"Bearer dp_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"}


def test_an_address_over_its_rate_is_refused_before_any_key_is_checked(
    api_process: Callable[..., tuple[str, ManagedProcess]], db: Database, broker: redis.Redis
) -> None:
    url, _ = api_process(DOCPIPE_AUTH="keys", DOCPIPE_CLIENT_IP_RPM="5", DOCPIPE_API_KEY_RPM="0")
    key = create_api_key(db, "acme")
    _clear_of_a_window_boundary()
    with httpx.Client(base_url=url) as http:
        guesses = [http.get("/runs/x", headers=_guess()).status_code for _ in range(5)]
        assert guesses == [401] * 5
        refused = http.get("/runs/x", headers={"Authorization": f"Bearer {key.plaintext}"})
        assert refused.status_code == 429, refused.text
        assert 1 <= int(refused.headers["retry-after"]) <= WINDOW_S
        assert "this address made more than 5 requests this minute" in refused.json()["detail"]
        assert http.get("/healthz").status_code == 200, "probes are never limited"
    # The valid key was never looked up: its use was not even noted.
    assert scalar(db, "SELECT last_used_at FROM api_key WHERE id = %s", key.key.id) is None


def test_the_client_address_comes_from_x_forwarded_for_only_through_a_trusted_proxy(
    api_process: Callable[..., tuple[str, ManagedProcess]], db: Database, broker: redis.Redis
) -> None:
    # uvicorn trusts X-Forwarded-For from 127.0.0.1 by default: this test client is a proxy.
    url, _ = api_process(DOCPIPE_CLIENT_IP_RPM="2")
    _clear_of_a_window_boundary()
    with httpx.Client(base_url=url) as http:

        def status(client_address: str) -> int:
            return http.get("/runs/x", headers={"X-Forwarded-For": client_address}).status_code

        assert [status("203.0.113.1") for _ in range(3)] == [404, 404, 429]
        assert status("203.0.113.2") == 404, "another client behind the proxy has its own count"
    # A peer that is not a trusted proxy cannot pick its address: its header is ignored.
    url, _ = api_process(DOCPIPE_CLIENT_IP_RPM="2", FORWARDED_ALLOW_IPS="192.0.2.1")
    _clear_of_a_window_boundary()
    with httpx.Client(base_url=url) as http:
        codes = [
            http.get("/runs/x", headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code
            for i in range(3)
        ]
    assert codes == [404, 404, 429]


# --- event streams ------------------------------------------------------------------------


def _bearer(plaintext: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {plaintext}"}


def _queued_run(http: httpx.Client, headers: dict[str, str]) -> str:
    """A run that stays queued: no worker serves it."""
    document = http.post(
        "/documents", content=b"TEXT", headers={**headers, "Content-Type": "text/plain"}
    )
    assert document.status_code == 201, document.text
    started = http.post(f"/documents/{document.json()['id']}/extract", headers=headers)
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def _events(lines: Iterator[str]) -> list[tuple[str, dict[str, object]]]:
    """Every event of a stream's lines until the server ends it."""
    events, name = [], None
    for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: ") and name is not None:
            events.append((name, json.loads(line.removeprefix("data: "))))
    return events


def test_an_event_stream_ends_at_its_maximum_duration_telling_the_client_to_reconnect(
    api_process: Callable[..., tuple[str, ManagedProcess]], db: Database, broker: redis.Redis
) -> None:
    url, _ = api_process(DOCPIPE_EVENT_STREAM_MAX_S="2")
    with httpx.Client(base_url=url, timeout=60) as http:
        run_id = _queued_run(http, {})
        with http.stream("GET", f"/runs/{run_id}/events") as response:
            assert response.status_code == 200
            events = _events(response.iter_lines())
    assert [name for name, _ in events] == ["progress", "reconnect"]
    assert "open a new one to go on" in str(events[-1][1]["detail"])
    assert broker.keys("docpipe:api-streams:*") == [], "the stream gave its slot back"


def test_open_streams_per_key_are_capped_across_api_processes(
    api_process: Callable[..., tuple[str, ManagedProcess]], db: Database, broker: redis.Redis
) -> None:
    env = {"DOCPIPE_AUTH": "keys", "DOCPIPE_EVENT_STREAMS_PER_KEY": "2"}
    first_url, _ = api_process(**env)
    second_url, _ = api_process(**env)
    busy, other = (
        _bearer(create_api_key(db, "acme").plaintext),
        _bearer(create_api_key(db, "acme").plaintext),
    )
    with httpx.Client(base_url=first_url) as setup:
        run_id = _queued_run(setup, busy)
    with ExitStack() as open_streams, httpx.Client(timeout=60) as http:
        for url in (first_url, second_url):  # one stream on each process
            stream = open_streams.enter_context(
                http.stream("GET", f"{url}/runs/{run_id}/events", headers=busy)
            )
            assert stream.status_code == 200
        refused = http.get(f"{first_url}/runs/{run_id}/events", headers=busy)
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert "has 2 event streams open" in refused.json()["detail"]
        with http.stream("GET", f"{second_url}/runs/{run_id}/events", headers=other) as own:
            assert own.status_code == 200, "another key has streams of its own"
    # The streams were closed by their client: their slots come back.
    with httpx.Client(timeout=60) as http:

        def opens() -> bool:
            with http.stream("GET", f"{first_url}/runs/{run_id}/events", headers=busy) as again:
                return again.status_code == 200

        assert wait_until(opens, timeout_s=30)


def test_a_revoked_keys_open_stream_ends(
    api_process: Callable[..., tuple[str, ManagedProcess]], db: Database, broker: redis.Redis
) -> None:
    url, _ = api_process(DOCPIPE_AUTH="keys")
    key = create_api_key(db, "acme")
    with httpx.Client(base_url=url, timeout=60) as http:
        run_id = _queued_run(http, _bearer(key.plaintext))
        with http.stream("GET", f"/runs/{run_id}/events", headers=_bearer(key.plaintext)) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            assert next(lines) == "event: progress"
            revoke_api_key(db, key.key.id)
            events = _events(lines)  # returns once the server ends the stream
    assert [name for name, _ in events][-1] == "revoked"
    assert events[-1][1] == {"detail": "the API key of this stream was revoked"}


def test_streams_are_capped_per_process_while_redis_is_down(
    make_api_client: Callable[..., TestClient], db: Database, redis_server: LocalRedis
) -> None:
    client = make_api_client(event_streams_per_key=1, event_stream_max_s=3)
    run_id = _queued_run_in_process(client)
    redis_server.stop()
    try:
        with client.stream("GET", f"/runs/{run_id}/events") as first:
            assert first.status_code == 200
            second = client.get(f"/runs/{run_id}/events")
            assert second.status_code == 429, second.text
            assert [name for name, _ in _events(first.iter_lines())][-1] == "reconnect"
        with client.stream("GET", f"/runs/{run_id}/events") as again:
            assert again.status_code == 200, "the slot came back"
    finally:
        redis_server.start()


def _queued_run_in_process(client: TestClient) -> str:
    client.put("/documents/doc-1", content=b"TEXT", headers={"Content-Type": "text/plain"})
    started = client.post("/documents/doc-1/extract")
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def test_the_openapi_document_states_this_deployments_bounds(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client(max_deadline_s=3600, max_run_budget_usd=5, max_batch_documents=7)
    paths = client.get("/openapi.json").json()["paths"]

    def body(path: str) -> dict[str, Any]:
        content = paths[path]["post"]["requestBody"]["content"]["application/json"]
        return dict(content["schema"]["properties"])

    def number(prop: dict[str, Any]) -> dict[str, Any]:
        return next(v for v in prop["anyOf"] if v.get("type") == "number")

    extract, batch = body("/documents/{document_id}/extract"), body("/batches")
    assert (
        number(extract["deadline_s"])["maximum"] == number(batch["deadline_s"])["maximum"] == 3600
    )
    assert (
        number(extract["budget_usd"])["maximum"] == number(batch["run_budget_usd"])["maximum"] == 5
    )
    # A batch's total is not a run's budget: only the column's own bound applies to it.
    assert number(batch["budget_usd"])["maximum"] == float(USD_MAX)
    string = next(v for v in extract["budget_usd"]["anyOf"] if v.get("type") == "string")
    assert string["pattern"] == usd_string_at_most(Decimal(5))
    assert batch["documents"]["maxItems"] == 7


def test_the_openapi_document_lists_this_deployments_pipelines_steps_and_models(
    make_api_client: Callable[..., TestClient],
) -> None:
    """What the schema can say of a pipeline, a step or a model is said, so that a client or
    a fuzzer is never told a name is fine that the API refuses (issue 33's schema-valid
    refusals): the catalog's keys, every pipeline's steps, the models the deployment knows."""
    paths = make_api_client().get("/openapi.json").json()["paths"]

    def enums(schema: dict[str, Any]) -> list[str]:
        return next(v["enum"] for v in (schema, *schema.get("anyOf", ())) if "enum" in v)

    keys = ["document_extract:v1", "nda_review:v1"]
    for path in ("/documents/{document_id}/extract", "/batches", "/evaluations"):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert enums(body["properties"]["pipeline"]) == keys, path
    parameters = paths["/runs/{run_id}/retry"]["post"]["parameters"]
    retry = next(p for p in parameters if p["name"] == "from_step")
    decision = paths["/runs/{run_id}/review"]["post"]["requestBody"]["content"]
    steps = enums(decision["application/json"]["schema"]["properties"]["from_step"])
    assert enums(retry["schema"]) == steps
    assert {"extract_text", "extract_fields", "summarize", "verdict"} <= set(steps)
    evaluation = paths["/evaluations"]["post"]["requestBody"]["content"]["application/json"]
    models = evaluation["schema"]["properties"]["models"]
    assert "gpt-4o" in models["additionalProperties"]["enum"]
    assert "*" in models["propertyNames"]["enum"]
