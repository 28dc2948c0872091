"""Evaluation sets and evaluations refuse bad input with a clear error and change nothing:
an item naming a document the tenant does not have, an expected output outside the step's
schema, an upload past its bounds (items, bytes, a line), an unknown pipeline version or
model, another tenant's set or evaluation (404); and a cancelled evaluation sends no call
after its cancel. The API in-process on real PostgreSQL and Redis; the cancel with a real
batch worker, beat and the fake provider."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACTS = sample_contracts(12)
JSONL = {"Content-Type": "application/jsonl"}
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')
EXPECTED = {"fields": CONTRACTS[0].expected}  # c-0's, and valid for any document
NEW_SET = {"name": "contracts", "pipeline": "document_extract", "step": "extract_fields"}


def jsonl(items: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(i).encode() + b"\n" for i in items)


def sample_items(count: int, prefix: str = "c") -> list[dict[str, Any]]:
    """Items of generated contracts sent with their text, each with what it states."""
    return [
        {
            "document": {"id": f"{prefix}-{i}", "text": CONTRACTS[i % len(CONTRACTS)].text},
            "expected": {"fields": dict(CONTRACTS[i % len(CONTRACTS)].expected)},
        }
        for i in range(count)
    ]


def upload(client: TestClient, items: bytes, set_name: str = "contracts") -> Any:
    return client.post(f"/evaluation-sets/{set_name}/items", content=items, headers=JSONL)


def made_set(client: TestClient, items: int = 3) -> dict[str, Any]:
    assert client.post("/evaluation-sets", json=NEW_SET).status_code == 201
    added = upload(client, jsonl(sample_items(items)))
    assert added.status_code == 200, added.text
    body: dict[str, Any] = added.json()
    return body


def unchanged(client: TestClient, before: dict[str, Any], db: Database, documents: int) -> None:
    """The set is at the version and size it had, and no document was stored."""
    now = client.get("/evaluation-sets/contracts").json()
    assert (now["version"], now["items"]) == (before["version"], before["items"])
    assert scalar(db, "SELECT count(*) FROM document") == documents


def test_an_item_naming_a_document_the_tenant_does_not_have_is_404_and_adds_nothing(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    before = made_set(client)
    documents = scalar(db, "SELECT count(*) FROM document")
    # A new document first (sent with its text): it is not kept when the upload is refused.
    items = [*sample_items(1, prefix="new"), {"document": "nobody-has-this", "expected": EXPECTED}]
    refused = upload(client, jsonl(items))
    assert refused.status_code == 404, refused.text
    assert "documents not found: 'nobody-has-this'" in refused.json()["detail"]
    unchanged(client, before, db, documents)


def test_expected_outputs_outside_the_schema_are_422_with_each_line_and_path(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    before = made_set(client)
    documents = scalar(db, "SELECT count(*) FROM document")
    good, bad = sample_items(2, prefix="schema")
    bad["expected"]["fields"]["term_months"] = "twelve"
    refused = upload(client, jsonl([good, bad, {"document": "c-0", "expected": {"x": 1}}]))
    assert refused.status_code == 422, refused.text
    errors = refused.json()["errors"]
    assert {(e["item"], e["path"]) for e in errors} >= {(2, "/fields/term_months")}
    assert any(e["item"] == 3 for e in errors)
    assert all(e["message"] for e in errors)
    unchanged(client, before, db, documents)


def test_a_document_named_on_two_lines_of_an_upload_counts_its_last(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    made_set(client)
    first = {"document": "c-0", "expected": EXPECTED}
    last = {"document": "c-0", "expected": {"fields": {**EXPECTED["fields"], "term_months": 7}}}
    added = upload(client, jsonl([first, last]))
    assert added.status_code == 200, added.text
    assert (added.json()["version"], added.json()["items"]) == (2, 3)
    items = client.get("/evaluation-sets/contracts/items").json()["items"]
    by_document = {i["document_id"]: i["expected"] for i in items}
    assert by_document["c-0"]["fields"]["term_months"] == 7


def test_an_upload_past_its_bounds_is_refused_and_changes_nothing(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(
        max_evaluation_items=10_000,
        max_evaluation_upload_bytes=8_000_000,
        max_expected_output_bytes=2_000,
    )
    before = made_set(client)
    documents = scalar(db, "SELECT count(*) FROM document")
    # 10,001 items of an existing document, within the bytes: one item too many (422).
    many = jsonl([{"document": "c-0", "expected": EXPECTED}] * 10_001)
    assert len(many) < 8_000_000
    too_many = upload(client, many)
    assert too_many.status_code == 422, too_many.text
    assert "more than 10000 items" in too_many.json()["detail"]
    # More bytes than an upload may have: cut off as it arrives (413).
    too_big = upload(client, many * 2)
    assert too_big.status_code == 413, too_big.text
    # One line longer than an item may be: named by its number (422).
    long_line = jsonl([{"document": "c-0", "expected": {"fields": {"x": "y" * 3_000}}}])
    too_long = upload(client, jsonl(sample_items(1, prefix="long")) + long_line)
    assert too_long.status_code == 422, too_long.text
    assert too_long.json()["detail"].startswith("line 2:")
    # Not JSON lines at all.
    assert upload(client, b"not json\n").status_code == 422
    wrong_kind = client.post(
        "/evaluation-sets/contracts/items", content=b"{}", headers={"Content-Type": "text/csv"}
    )
    assert wrong_kind.status_code == 415
    unchanged(client, before, db, documents)


def test_an_unknown_pipeline_version_or_model_is_422_and_starts_nothing(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    made_set(client)
    for wanted, says in (
        ({"pipeline": "document_extract:v99"}, "document_extract:v99"),
        ({"pipeline": "no_such_pipeline:v1"}, "no_such_pipeline"),
        ({"pipeline": "document_extract:v1", "models": {"*": "gpt-9"}}, "'gpt-9' is on no"),
        (
            {"pipeline": "document_extract:v1", "models": {"extract_text": "gpt-4o"}},
            "no step 'extract_text' that asks a model",
        ),
    ):
        refused = client.post("/evaluations", json={"set": "contracts", **wanted})
        assert refused.status_code == 422, (wanted, refused.text)
        assert says in refused.text, (says, refused.text)
    assert client.post("/evaluations", json={"set": "nope", "pipeline": "x:v1"}).status_code == 404
    assert scalar(db, "SELECT count(*) FROM evaluation") == 0
    assert scalar(db, "SELECT count(*) FROM batch") == 0
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 0


def test_another_tenants_set_and_evaluation_are_not_found(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(auth="keys", api_key_rpm=0)
    ours = {"Authorization": f"Bearer {create_api_key(db, 'acme', 'a').plaintext}"}
    theirs = {"Authorization": f"Bearer {create_api_key(db, 'globex', 'g').plaintext}"}
    client.headers.update(ours)
    made = made_set(client)
    started = client.post(
        "/evaluations", json={"set": "contracts", "pipeline": "document_extract:v1"}
    )
    assert started.status_code == 202, started.text
    evaluation = started.json()["id"]
    for method, path, body in (
        ("GET", "/evaluation-sets/contracts", None),
        ("GET", f"/evaluation-sets/{made['id']}", None),
        ("GET", "/evaluation-sets/contracts/items", None),
        ("POST", "/evaluation-sets/contracts/promote", {"run_id": evaluation}),
        ("POST", "/evaluations", {"set": "contracts", "pipeline": "document_extract:v1"}),
        ("GET", f"/evaluations/{evaluation}", None),
        ("GET", f"/evaluations/{evaluation}/documents", None),
        ("GET", f"/evaluations/{evaluation}/documents/c-0", None),
        ("POST", f"/evaluations/{evaluation}/cancel", None),
        ("GET", f"/evaluations/compare?baseline={evaluation}&candidate={evaluation}", None),
    ):
        answer = client.request(method, path, json=body, headers=theirs)
        assert answer.status_code == 404, (method, path, answer.text)
    refused = client.post(
        "/evaluation-sets/contracts/items", content=jsonl(sample_items(1)), headers=theirs | JSONL
    )
    assert refused.status_code == 404
    assert client.get("/evaluation-sets", headers=theirs).json() == {"sets": []}
    assert client.get("/evaluations", headers=theirs).json() == {"evaluations": []}
    # Nothing of ours changed: the set as it was, the evaluation still running.
    assert client.get("/evaluation-sets/contracts").json()["version"] == made["version"]
    assert client.get(f"/evaluations/{evaluation}").json()["status"] == "running"


@pytest.fixture
def batch_lane(
    start_worker: Callable[..., ManagedProcess], start_beat: Callable[..., ManagedProcess]
) -> None:
    start_worker("batch", concurrency=1)
    start_beat()


def test_a_cancelled_evaluation_sends_no_call_after_its_cancel(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    batch_lane: None,
) -> None:
    fake_llm.configure(latency_ms=[300, 300])
    client = make_api_client(batch_admission_window=2)
    made_set(client, items=12)
    started = client.post(
        "/evaluations", json={"set": "contracts", "pipeline": "document_extract:v1"}
    )
    assert started.status_code == 202, started.text
    evaluation = started.json()["id"]
    wait_until(lambda: scalar(db, "SELECT count(*) FROM llm_call_log") >= 2, timeout_s=120)

    cancelled = client.post(f"/evaluations/{evaluation}/cancel")
    cancelled_at = scalar(db, "SELECT now()")
    assert cancelled.status_code == 200, cancelled.text

    def settled() -> bool:  # the calls in flight at the cancel have finished
        return (
            scalar(db, "SELECT count(*) FROM llm_call_log WHERE status = 'sent'") == 0
            and scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'running'") == 0
        )

    wait_until(settled, timeout_s=120)
    late = scalar(db, "SELECT count(*) FROM llm_call_log WHERE created_at > %s", cancelled_at)
    assert late == 0, "no provider call was sent after the cancel"
    report = wait_until(
        lambda: (r := client.get(f"/evaluations/{evaluation}").json())["report"] and r["report"],
        timeout_s=60,
    )
    assert report["runs_by_status"].get("cancelled", 0) >= 1, report["runs_by_status"]
    assert report["documents"] == 12
    again = client.post(f"/evaluations/{evaluation}/cancel")
    assert again.status_code == 409, again.text


def test_the_pages_show_another_tenants_evaluation_as_not_found(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(
        auth="keys", secrets_key=Fernet.generate_key().decode(), api_key_rpm=0, client_ip_rpm=0
    )
    client.follow_redirects = False
    ours = {"Authorization": f"Bearer {create_api_key(db, 'acme', 'a').plaintext}"}
    made_set_as(client, ours)
    started = client.post(
        "/evaluations", json={"set": "contracts", "pipeline": "document_extract:v1"}, headers=ours
    )
    evaluation = started.json()["id"]
    token = TOKEN.search(client.get("/ui/sign-in").text)
    assert token is not None
    theirs = create_api_key(db, "globex", "g").plaintext
    signed = client.post("/ui/sign-in", data={"api_key": theirs, "csrf_token": token.group(1)})
    assert signed.status_code == 303
    index = client.get("/ui/evaluations")
    assert index.status_code == 200
    assert "No evaluation set yet." in index.text and evaluation not in index.text
    for path in (
        f"/ui/evaluations/{evaluation}",
        f"/ui/evaluations/{evaluation}/documents/c-0",
        f"/ui/evaluations/compare?baseline={evaluation}&candidate={evaluation}",
    ):
        page = client.get(path)
        assert page.status_code == 404, (path, page.text[:300])
        assert "Not found" in page.text
    assert client.get("/ui/evaluations/not-an-id").status_code == 422


def made_set_as(client: TestClient, headers: dict[str, str]) -> None:
    assert client.post("/evaluation-sets", json=NEW_SET, headers=headers).status_code == 201
    added = client.post(
        "/evaluation-sets/contracts/items",
        content=jsonl(sample_items(2)),
        headers=headers | JSONL,
    )
    assert added.status_code == 200, added.text


def test_a_name_postgresql_cannot_hold_is_refused_not_a_server_error(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    """PostgreSQL's text holds no NUL character (nor a lone surrogate): a set's name or id, a
    document id, a pipeline or a cursor carrying one is refused or not found, never a 500 (a
    schemathesis find: POST /evaluations with such a set name)."""
    client = make_api_client()
    made_set(client)
    evaluation = "00000000-0000-0000-0000-000000000000"
    for method, url, body in (
        ("POST", "/evaluations", {"set": "\u0000D\ud83fb", "pipeline": "document_extract:v1"}),
        ("POST", "/evaluations", {"set": "con\u0000tracts", "pipeline": "document_extract:v1"}),
        ("GET", "/evaluation-sets/con%00tracts", None),
        ("GET", "/evaluation-sets/con%00tracts/items", None),
        ("GET", "/evaluation-sets/contracts/items?after=c%00", None),
        ("GET", f"/evaluations/{evaluation}/documents/c%00", None),
        ("GET", f"/evaluations/{evaluation}/documents?after=c%00", None),
        ("GET", "/reviews?pipeline=document_extract%00", None),
    ):
        # json.dumps escapes the surrogate as \ud83f, as schemathesis sent it.
        content = None if body is None else json.dumps(body)
        answer = client.request(
            method, url, content=content, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code in (404, 422), (method, url, answer.status_code, answer.text)
    item = sample_items(1, prefix="nul")[0]
    for where in ("document", "expected"):
        bad = {**item, where: {**item[where], "id" if where == "document" else "x": "a\u0000"}}
        refused = upload(client, jsonl([bad]))
        assert refused.status_code == 422, (where, refused.status_code, refused.text)
    assert scalar(db, "SELECT count(*) FROM evaluation") == 0
