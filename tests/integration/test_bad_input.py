"""Bad input never gets a 5xx and always an answer the OpenAPI document describes.

Schemathesis generates requests for every operation from the OpenAPI document (valid ones
and broken ones) against a real uvicorn with real PostgreSQL and Redis, and checks every
answer. The explicit tests below pin the cases that matter most and the bugs it found.
(test_api.py and test_batches.py cover the other basics: 413/415/422 of documents, options
and batches, unknown runs, malformed Idempotency-Keys of /extract.)
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis import checks

import tests.support.schemathesis_hooks  # noqa: F401 (registers the file media types)
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_api.main import create_app
from docpipe_dev.localstack import LocalRedis, free_port
from docpipe_dev.processes import ManagedProcess, api_argv
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM

_, STEP1, STEP2, STEP3 = DOCUMENT_EXTRACT.step_names  # extract_text, then the model steps
TEXT = "SUPPLY AGREEMENT\nPreamble.\n1. PRICE\nThe price is 100 EUR.\n"
EXAMPLES_PER_OPERATION = 40


# --- schemathesis against a real server ---------------------------------------------------


@dataclass(frozen=True)
class LiveApi:
    url: str
    headers: dict[str, str]


@pytest.fixture(scope="module")
def live_api(
    database_url: str, redis_server: LocalRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveApi]:
    """uvicorn with API keys on, no rate limit, small size limits (so that generated
    batches stay small), and one tenant's key."""
    port = free_port()
    log = Path(tmp_path_factory.mktemp("fuzz")) / "api.log"
    env = {
        "DOCPIPE_DATABASE_URL": database_url,
        "DOCPIPE_REDIS_URL": redis_server.url,
        "DOCPIPE_AUTH": "keys",
        "DOCPIPE_API_KEY_RPM": "0",
        "DOCPIPE_CLIENT_IP_RPM": "0",
        "DOCPIPE_MAX_BATCH_DOCUMENTS": "20",
        "DOCPIPE_MAX_DOCUMENT_BYTES": "20000",
    }
    server = ManagedProcess("api", api_argv(host="127.0.0.1", port=port), log, env=env).start()
    try:
        server.wait_for_log("Application startup complete", timeout_s=60)
        database = Database(database_url, max_size=1)
        key = create_api_key(database, f"fuzz-{uuid.uuid4().hex[:8]}").plaintext
        database.close()
        yield LiveApi(f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"})
        assert "Traceback" not in server.log_text(), server.log_text()[-3000:]
    finally:
        server.stop()


# The OpenAPI document is built by the app itself, without connecting anywhere; the requests
# go to the live server. Its PDF and DOCX bodies are generated as the schemathesis command's
# are (the hooks register their media types).
schema = schemathesis.openapi.from_dict(create_app().openapi())


# Every answer is right. Not checked here: that every schema-valid request is accepted
# (some checks are semantic: an unknown pipeline or step, more than 6 decimal places, an id
# taken by other text), and the auth-related negative checks, which cannot tell the key
# this test adds to every request from one the case meant to send (test_tenants.py covers
# 401s).
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
    checks.missing_required_header,
]


# Marked by hand: live_api starts a uvicorn of its own, not through process_group.
@pytest.mark.processes
@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same requests on every run: CI fails on code, not on luck
)
def test_every_operation_answers_as_documented_and_never_5xx(
    case: schemathesis.Case, live_api: LiveApi
) -> None:
    case.call_and_validate(
        base_url=live_api.url, headers=live_api.headers, checks=CHECKS, timeout=10
    )


# --- the schemathesis command, every check and phase ---------------------------------------

# Bounded in `make test`; `make schemathesis` runs the same with schemathesis' own number of
# examples (0). Each run draws a seed of its own and prints it: a find is replayed with
# DOCPIPE_SCHEMATHESIS_SEED=<seed> (the same examples, on the same code).
CLI_MAX_EXAMPLES = int(os.environ.get("DOCPIPE_SCHEMATHESIS_MAX_EXAMPLES", "10"))
CLI_SEED = int(os.environ.get("DOCPIPE_SCHEMATHESIS_SEED") or random.randrange(2**31))
# Which statuses a schema-valid request may legitimately get where the schema cannot say
# why (each with its reason).
CONFIG = Path(__file__).resolve().parents[1] / "support" / "schemathesis.toml"


@pytest.fixture
def deployed_api(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> LiveApi:
    """The stack as `docpipe stack up` runs it (API keys, default limits, webhooks on, both
    worker pools, so that streamed runs end), without the rate limits, so that every
    generated request reaches the routes; one tenant's key."""
    url = start_api(
        DOCPIPE_AUTH="keys",
        DOCPIPE_API_KEY_RPM="0",
        DOCPIPE_CLIENT_IP_RPM="0",
        DOCPIPE_WEBHOOKS_ENABLED="true",
        DOCPIPE_SECRETS_KEY=Fernet.generate_key().decode(),
    )
    for lane in ("interactive", "batch"):
        start_worker(lane, concurrency=1)
    key = create_api_key(db, f"st-{uuid.uuid4().hex[:8]}").plaintext
    return LiveApi(url, {"Authorization": f"Bearer {key}"})


def test_schemathesis_with_every_check_and_phase_finds_nothing(
    deployed_api: LiveApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's command: no 5xx, no answer the document does not describe, no request
    it allows refused as malformed, and the stateful phase follows the links."""
    argv = (
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "--config-file",
            str(CONFIG),
            "run",
            f"{deployed_api.url}/openapi.json",
            "--checks",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "-H",
            f"Authorization: {deployed_api.headers['Authorization']}",
            "--workers",
            "1",
        ]
        + (["--max-examples", str(CLI_MAX_EXAMPLES)] if CLI_MAX_EXAMPLES else [])
        + ["--seed", str(CLI_SEED)]
    )
    hooks = {
        "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    done = subprocess.run(
        argv,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={**os.environ, **hooks},
    )
    summary = done.stdout[done.stdout.find("SUMMARY") :]
    replay = f"schemathesis seed {CLI_SEED}: replay with DOCPIPE_SCHEMATHESIS_SEED={CLI_SEED}"
    with capsys.disabled():  # on the terminal whether the test passes or not
        print(f"\n{replay}")
    print(summary)  # shown with a failure, and by make schemathesis (-s)
    assert f"Seed: {CLI_SEED}" in done.stdout, done.stdout[:2000]
    assert done.returncode == 0, f"{replay}\n" + done.stdout[-6000:] + done.stderr[-2000:]
    # Every operation of the document was selected and tested.
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", summary)
    assert selected is not None and len(set(selected.groups())) == 1, summary
    assert int(selected[1]) >= 26 and "failure" not in summary, summary
    assert "✅ Stateful" in summary, summary


# --- what schemathesis found ----------------------------------------------------------------


def test_a_document_id_ending_in_a_newline_is_refused(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    """It used to be stored, and its Location header then broke the response."""
    client = make_api_client()
    response = client.put("/documents/abc%0A", content=b"x", headers={"Content-Type": "text/plain"})
    assert response.status_code == 422
    assert scalar(db, "SELECT count(*) FROM document") == 0
    assert client.get("/documents/abc%0A").status_code == 404


def test_405_names_every_method_of_the_path(make_api_client: Callable[..., TestClient]) -> None:
    client = make_api_client()
    response = client.patch("/documents/doc-1")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, PUT, DELETE"
    assert client.request("OPTIONS", "/runs/x").headers["allow"] == "GET"


def test_the_openapi_document_has_no_dangling_references(
    make_api_client: Callable[..., TestClient],
) -> None:
    document = make_api_client().get("/openapi.json").json()

    def refs(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                yield node["$ref"]
            for value in node.values():
                yield from refs(value)
        elif isinstance(node, list):
            for item in node:
                yield from refs(item)

    for ref in set(refs(document)):
        target: Any = document
        for part in ref.removeprefix("#/").split("/"):
            assert isinstance(target, dict) and part in target, f"{ref} resolves to nothing"
            target = target[part]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"deadline_s": "60"}, "body.deadline_s: Input should be a valid number"),
        ({"start_at": 0}, "body.start_at: Input should be a valid datetime"),
        ({"lane": ["batch"]}, "body.lane"),
    ],
)
def test_option_values_of_another_type_are_refused_not_coerced(
    make_api_client: Callable[..., TestClient], options: dict[str, Any], message: str
) -> None:
    client = make_api_client()
    client.put("/documents/doc-1", content=TEXT.encode(), headers={"Content-Type": "text/plain"})
    response = client.post("/documents/doc-1/extract", json=options)
    assert response.status_code == 422
    assert message in response.json()["detail"]


def test_decimal_amounts_may_be_numbers_or_decimal_strings(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    client.put("/documents/doc-1", content=TEXT.encode(), headers={"Content-Type": "text/plain"})
    for budget in (0.25, "0.25", 1):
        response = client.post("/documents/doc-1/extract", json={"budget_usd": budget})
        assert response.status_code == 202, response.text
    assert client.post("/documents/doc-1/extract", json={"budget_usd": ""}).status_code == 422


# --- oversize bodies and wrong content types ----------------------------------------------


def test_oversized_extraction_options_are_refused_with_413(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    client.put("/documents/doc-1", content=TEXT.encode(), headers={"Content-Type": "text/plain"})
    huge = {"pipeline": "x" * 70_000}
    response = client.post("/documents/doc-1/extract", json=huge)
    assert response.status_code == 413
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 0


def test_a_streamed_batch_over_the_size_limit_is_cut_off_with_413(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(max_batch_bytes=1000)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies while reading
        yield b'{"documents": [{"text": "'
        for _ in range(20):
            yield b"y" * 100
        yield b'"}]}'

    response = client.post(
        "/batches", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["detail"] == (
        "the body is larger than the limit of 1000 bytes (DOCPIPE_MAX_BATCH_BYTES)"
    )
    assert scalar(db, "SELECT count(*) FROM batch") == 0


@pytest.mark.parametrize(
    ("method", "path", "content_type"),
    [
        ("POST", "/batches", None),
        ("POST", "/batches", "application/x-www-form-urlencoded"),
        ("POST", "/batches", "multipart/form-data; boundary=x"),
        ("POST", "/documents", "multipart/form-data; boundary=x"),
        ("PUT", "/documents/doc-1", "application/xml"),
        ("POST", "/documents/doc-1/extract", "application/xml"),
    ],
)
def test_bodies_of_other_content_types_are_refused_with_415(
    make_api_client: Callable[..., TestClient], method: str, path: str, content_type: str | None
) -> None:
    client = make_api_client()
    client.put("/documents/doc-1", content=TEXT.encode(), headers={"Content-Type": "text/plain"})
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = client.request(method, path, content=b'{"documents": []}', headers=headers)
    assert response.status_code == 415, response.text
    assert "send" in response.json()["detail"]


def test_json_with_a_charset_parameter_is_json(make_api_client: Callable[..., TestClient]) -> None:
    client = make_api_client()
    response = client.post(
        "/documents",
        content=b'{"text": "t"}',
        headers={"Content-Type": "Application/JSON; charset=utf-8"},
    )
    assert response.status_code == 201


# --- unknown ids and malformed parameters -------------------------------------------------


@pytest.mark.parametrize(
    "batch_id", ["0b6f2c1e-5d3a-4f7e-9a21-3c8d4e5f6a7b", "not-a-uuid", "nul%00"]
)
@pytest.mark.parametrize(("method", "suffix"), [("GET", "/runs"), ("POST", "/cancel")])
def test_unknown_batches_are_not_found(
    make_api_client: Callable[..., TestClient], batch_id: str, method: str, suffix: str
) -> None:
    response = make_api_client().request(method, f"/batches/{batch_id}{suffix}")
    assert response.status_code == 404
    assert "does not exist" in response.json()["detail"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("after=not-a-uuid", "query.after"),
        ("status=sleeping", "query.status"),
        ("limit=0", "query.limit"),
        ("limit=1001", "query.limit"),
    ],
)
def test_malformed_batch_page_parameters_are_refused_with_422(
    make_api_client: Callable[..., TestClient], query: str, message: str
) -> None:
    client = make_api_client()
    batch_id = client.post("/batches", json={"documents": [{"text": TEXT}]}).json()["batch_id"]
    response = client.get(f"/batches/{batch_id}/runs?{query}")
    assert response.status_code == 422
    assert message in response.json()["detail"]


@pytest.mark.parametrize("key", ["", "k" * 201, "ключ".encode(), b"tab\there"])
def test_malformed_idempotency_keys_of_batches_are_refused_with_422(
    make_api_client: Callable[..., TestClient], db: Database, key: str | bytes
) -> None:
    response = make_api_client().post(
        "/batches", json={"documents": [{"text": TEXT}]}, headers={"Idempotency-Key": key}
    )
    assert response.status_code == 422
    assert "Idempotency-Key" in response.json()["detail"]
    assert scalar(db, "SELECT count(*) FROM batch") == 0


def test_an_empty_retry_step_is_refused_with_422(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    client.put("/documents/doc-1", content=TEXT.encode(), headers={"Content-Type": "text/plain"})
    run_id = client.post("/documents/doc-1/extract").json()["run_id"]
    client.post(f"/runs/{run_id}/cancel")
    response = client.post(f"/runs/{run_id}/retry?from_step=")
    assert response.status_code == 422
    assert "query.from_step" in response.json()["detail"]


# --- ended runs and batches, cancelled or retried again -----------------------------------


def finish_run(db: Database, run_id: str) -> None:
    """Run every step to done in-process (no workers; a text's extract_text is done already)."""
    for step, next_step in ((STEP1, STEP2), (STEP2, STEP3), (STEP3, None)):
        claim = runs.claim_step(db, run_id, step, owner="test", lease_s=30)
        assert claim is not None
        runs.record_step_result(
            db,
            claim,
            owner="test",
            output={},
            model="gpt-4o-mini",
            prompt_version="v1",
            next_step=next_step,
        )


def test_a_finished_run_cannot_be_cancelled_but_can_be_retried_once(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    client.put("/documents/doc-1", content=TEXT.encode(), headers={"Content-Type": "text/plain"})
    run_id = client.post("/documents/doc-1/extract").json()["run_id"]
    finish_run(db, run_id)

    cancel = client.post(f"/runs/{run_id}/cancel")
    assert cancel.status_code == 409
    assert "already ended (done)" in cancel.json()["detail"]

    retried = client.post(f"/runs/{run_id}/retry", params={"from_step": STEP3})
    assert retried.status_code == 202
    assert (retried.json()["status"], retried.json()["steps_done"]) == ("queued", 3)
    again = client.post(f"/runs/{run_id}/retry", params={"from_step": STEP3})
    assert again.status_code == 409
    assert "only ended runs restart" in again.json()["detail"]


def test_a_cancelled_run_is_cancelled_once_and_retried_once(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    client.put("/documents/doc-1", content=TEXT.encode(), headers={"Content-Type": "text/plain"})
    run_id = client.post("/documents/doc-1/extract").json()["run_id"]
    assert client.post(f"/runs/{run_id}/cancel").status_code == 200
    assert client.post(f"/runs/{run_id}/cancel").status_code == 409
    assert client.post(f"/runs/{run_id}/retry").status_code == 202
    assert client.post(f"/runs/{run_id}/retry").status_code == 409
    assert client.post(f"/runs/{run_id}/cancel").status_code == 200, "the reopened run stops"


def test_a_cancelled_batch_and_its_runs_cannot_be_cancelled_again(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    batch_id = client.post("/batches", json={"documents": [{"text": TEXT}]}).json()["batch_id"]
    assert client.post(f"/batches/{batch_id}/cancel").status_code == 200
    again = client.post(f"/batches/{batch_id}/cancel")
    assert again.status_code == 409
    assert "already ended (cancelled)" in again.json()["detail"]
    run_id = client.get(f"/batches/{batch_id}/runs").json()["runs"][0]["run_id"]
    assert client.post(f"/runs/{run_id}/cancel").status_code == 409
