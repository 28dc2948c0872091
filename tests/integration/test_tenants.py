"""Tenants and API keys: keys are stored hashed and made by the CLI, every route but the
probes wants one, another tenant's ids are 404 on every route, and each key has a request
rate limit. Real PostgreSQL and Redis, the API in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state.db import Database
from docpipe.state.tenants import (
    KEY_PATTERN,
    InvalidApiKey,
    RevokedApiKey,
    VerifiedKeys,
    create_api_key,
    list_api_keys,
    revoke_api_key,
    verify_api_key,
)
from docpipe_dev.localstack import LocalRedis
from tests.support.factories import scalar
from tests.support.processes import wait_until

TEXT = "SUPPLY AGREEMENT\nPreamble.\n1. PRICE\nThe price is 100 EUR.\n"
STEP1, STEP2, _ = DOCUMENT_EXTRACT.step_names[1:]  # after extract_text


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keyed_client(make_api_client: Callable[..., TestClient]) -> Callable[..., TestClient]:
    """The API with DOCPIPE_AUTH=keys (other settings as keyword arguments)."""

    def make(**settings: object) -> TestClient:
        return make_api_client(auth="keys", **settings)

    return make


# --- keys in the library and the CLI ------------------------------------------------------


def test_a_key_is_shown_once_and_stored_only_as_a_hash(db: Database) -> None:
    created = create_api_key(db, "acme", "ci")
    key = created.plaintext
    assert key.startswith(f"dp_{created.key.id}_") and len(key) == 3 + 12 + 1 + 43
    assert verify_api_key(db, key) == (created.key.id, "acme")
    match = KEY_PATTERN.match(key)
    assert match is not None and match["id"] == created.key.id
    secret = match["secret"]
    with db.session() as s:
        row = s.conn.execute(b"SELECT api_key::text AS everything FROM api_key").fetchone()
    assert row is not None and secret not in row["everything"] and key not in row["everything"]
    assert "dp_" + created.key.id + "_***" in repr(created) and secret not in repr(created)
    assert [(k.id, k.tenant_id, k.name) for k in list_api_keys(db)] == [
        (created.key.id, "acme", "ci")
    ]


def test_malformed_unknown_and_revoked_keys_are_refused(db: Database) -> None:
    created = create_api_key(db, "acme")
    key_id = created.key.id
    forged = f"dp_{key_id}_{'A' * 43}"  # the right id with a wrong secret
    for bad in ("", "nonsense", f"dp_{'0' * 12}_{'A' * 43}", forged, created.plaintext + "x"):
        with pytest.raises(InvalidApiKey) as refused:
            verify_api_key(db, bad)
        assert not isinstance(refused.value, RevokedApiKey)
        assert "A" * 43 not in str(refused.value)
    assert revoke_api_key(db, key_id) is not None
    assert revoke_api_key(db, key_id) is None, "revoking twice changes nothing"
    with pytest.raises(RevokedApiKey, match="revoked"):
        verify_api_key(db, created.plaintext)


def test_a_remembered_key_is_asked_for_again_after_its_ttl_and_a_revoked_one_refused(
    db: Database,
) -> None:
    created = create_api_key(db, "acme")
    keys = VerifiedKeys(ttl_s=0.3)
    assert keys.remembered(created.plaintext) is None
    assert keys.verify(db, created.plaintext) == (created.key.id, "acme")
    revoke_api_key(db, created.key.id)
    assert keys.remembered(created.plaintext) == (created.key.id, "acme"), "within its TTL"
    # Forgotten once its 0.3 s TTL runs out: polled, not slept.
    wait_until(lambda: keys.remembered(created.plaintext) is None, timeout_s=10)
    with pytest.raises(RevokedApiKey):
        keys.verify(db, created.plaintext)
    forged = f"dp_{created.key.id}_{'A' * 43}"
    with pytest.raises(InvalidApiKey):
        keys.verify(db, forged)
    assert keys.remembered(forged) is None, "a refused key is never remembered"
    never = VerifiedKeys(ttl_s=0)
    other = create_api_key(db, "acme")
    never.verify(db, other.plaintext)
    assert never.remembered(other.plaintext) is None


def docpipe_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCPIPE_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "docpipe.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_cli_creates_lists_and_revokes_keys(db: Database, database_url: str) -> None:
    created = docpipe_cli(database_url, "api-key", "create", "acme", "--name", "billing")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert "shown only now" in created.stderr and key not in created.stderr
    key_id, tenant = verify_api_key(db, key)
    assert tenant == "acme"

    listed = docpipe_cli(database_url, "api-key", "list")
    assert listed.returncode == 0
    assert key_id in listed.stdout and "billing" in listed.stdout and key not in listed.stdout

    assert docpipe_cli(database_url, "api-key", "revoke", key_id).returncode == 0
    assert docpipe_cli(database_url, "api-key", "revoke", key_id).returncode == 1
    with pytest.raises(RevokedApiKey):
        verify_api_key(db, key)
    refused = docpipe_cli(database_url, "api-key", "create", "not a tenant!")
    assert refused.returncode == 2 and "tenant id" in refused.stdout


# --- the API: who may call it -------------------------------------------------------------


def test_requests_without_a_valid_key_get_401_with_a_bearer_challenge(
    keyed_client: Callable[..., TestClient], db: Database
) -> None:
    client = keyed_client()
    created = create_api_key(db, "acme")
    revoked = create_api_key(db, "acme")
    revoke_api_key(db, revoked.key.id)
    attempts: list[tuple[dict[str, str], str, str]] = [
        ({}, "Bearer", "Authorization: Bearer"),
        ({"Authorization": "Basic YWRtaW46YWRtaW4="}, "Bearer", "Authorization: Bearer"),
        (bearer("not-a-key"), 'Bearer error="invalid_token"', "malformed"),
        (bearer(f"dp_{created.key.id}_{'B' * 43}"), 'Bearer error="invalid_token"', "not valid"),
        (bearer(revoked.plaintext), 'Bearer error="invalid_token"', "revoked"),
    ]
    for headers, challenge, detail in attempts:
        response = client.get("/documents/doc-1", headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["www-authenticate"] == challenge
        assert detail in response.json()["detail"]
    assert client.get("/documents/doc-1", headers=bearer(created.plaintext)).status_code == 404


def test_the_key_is_checked_before_the_body_is_read(
    keyed_client: Callable[..., TestClient], db: Database
) -> None:
    client = keyed_client(max_document_bytes=10)
    oversized = client.put(
        "/documents/doc-1", content=b"x" * 100, headers={"Content-Type": "text/plain"}
    )
    assert oversized.status_code == 401
    untyped = client.post("/batches", content=b"{}")
    assert untyped.status_code == 401
    assert scalar(db, "SELECT count(*) FROM document") == 0


def test_probes_and_the_openapi_document_need_no_key(
    keyed_client: Callable[..., TestClient],
) -> None:
    client = keyed_client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200


def test_the_openapi_document_declares_the_bearer_scheme_401_and_429(
    keyed_client: Callable[..., TestClient],
) -> None:
    document = keyed_client().get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert schemes == {
        "HTTPBearer": {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "dp_<id>_<secret>",
            "description": "A tenant's API key, made with `docpipe api-key create TENANT`",
        }
    }
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path in ("/healthz", "/readyz"):
                assert "security" not in operation, path
                continue
            assert operation["security"] == [{"HTTPBearer": []}], (method, path)
            responses = operation["responses"]
            assert {"401", "429"} <= set(responses), (method, path)
            assert "WWW-Authenticate" in responses["401"]["headers"]
            assert "Retry-After" in responses["429"]["headers"]


def test_a_used_key_records_when_it_was_last_used(
    keyed_client: Callable[..., TestClient], db: Database
) -> None:
    client = keyed_client()
    created = create_api_key(db, "acme")
    assert list_api_keys(db)[0].last_used_at is None
    client.get("/documents/x", headers=bearer(created.plaintext))
    assert list_api_keys(db)[0].last_used_at is not None


# --- tenant isolation ---------------------------------------------------------------------


def test_another_tenants_documents_runs_and_batches_are_not_found_on_every_route(
    keyed_client: Callable[..., TestClient], db: Database
) -> None:
    client = keyed_client()
    alice = bearer(create_api_key(db, "alice").plaintext)
    bob = bearer(create_api_key(db, "bob").plaintext)
    stored = client.put(
        "/documents/contract",
        content=TEXT.encode(),
        headers={**alice, "Content-Type": "text/plain"},
    )
    assert stored.status_code == 201
    run_id = client.post(
        "/documents/contract/extract", headers={**alice, "Idempotency-Key": "k"}
    ).json()["run_id"]
    batch_id = client.post(
        "/batches", json={"documents": [{"id": "contract"}]}, headers=alice
    ).json()["batch_id"]

    attempts: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/documents/contract", {}),
        ("GET", "/documents/contract/pages/1", {}),
        ("DELETE", "/documents/contract", {}),
        ("POST", "/documents/contract/extract", {}),
        ("GET", f"/runs/{run_id}", {}),
        ("GET", f"/runs/{run_id}/events", {}),
        ("POST", f"/runs/{run_id}/cancel", {}),
        ("POST", f"/runs/{run_id}/retry", {}),
        ("GET", f"/batches/{batch_id}", {}),
        ("GET", f"/batches/{batch_id}/runs", {}),
        ("POST", f"/batches/{batch_id}/cancel", {}),
        ("POST", "/batches", {"json": {"documents": [{"id": "contract"}]}}),
    ]
    for method, path, kwargs in attempts:
        response = client.request(method, path, headers=bob, **kwargs)
        assert response.status_code == 404, (method, path, response.text)
        assert "not" in response.json()["detail"]

    # Reading several runs at once, bob's answer leaves alice's run out.
    both = f"{run_id},{uuid.uuid4()}"
    assert client.get("/runs", params={"ids": both}, headers=bob).json() == {"runs": []}
    assert [
        r["run_id"] for r in client.get("/runs", params={"ids": both}, headers=alice).json()["runs"]
    ] == [run_id]

    assert client.get(f"/runs/{run_id}", headers=alice).json()["status"] == "queued"
    assert client.get(f"/batches/{batch_id}", headers=alice).json()["status"] == "running"
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 2, "bob created nothing"
    assert client.get("/documents/contract", headers=alice).status_code == 200


def test_tenants_have_separate_document_ids_and_idempotency_keys(
    keyed_client: Callable[..., TestClient], db: Database
) -> None:
    client = keyed_client()
    alice = bearer(create_api_key(db, "alice").plaintext)
    bob = bearer(create_api_key(db, "bob").plaintext)
    for who, text in ((alice, "alice's text"), (bob, "bob's text")):
        put = client.put(
            "/documents/same-id",
            content=text.encode(),
            headers={**who, "Content-Type": "text/plain"},
        )
        assert put.status_code == 201, "the same id is a new document for another tenant"
    runs = {
        client.post(
            "/documents/same-id/extract", headers={**who, "Idempotency-Key": "order-1"}
        ).json()["run_id"]
        for who in (alice, bob)
    }
    assert len(runs) == 2
    assert scalar(db, "SELECT count(DISTINCT tenant_id) FROM pipeline_run") == 2


def test_without_keys_everyone_is_the_default_tenant(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()  # DOCPIPE_AUTH=none
    assert client.post("/documents", json={"text": TEXT}).status_code == 201
    assert scalar(db, "SELECT tenant_id FROM document") == "default"
    ignored = client.get("/documents/x", headers=bearer("not-a-key"))
    assert ignored.status_code == 404


# --- the per-key rate limit ---------------------------------------------------------------


def test_a_key_over_its_rate_gets_429_with_retry_after_and_others_are_unaffected(
    keyed_client: Callable[..., TestClient], db: Database, redis_server: LocalRedis
) -> None:
    client = keyed_client(api_key_rpm=3)
    busy = bearer(create_api_key(db, "busy").plaintext)
    quiet = bearer(create_api_key(db, "quiet").plaintext)
    tag = uuid.uuid4().hex  # fresh document ids: counting, not caching, is under test
    codes = [client.get(f"/documents/{tag}-{i}", headers=busy).status_code for i in range(4)]
    assert codes == [404, 404, 404, 429]
    limited = client.get("/documents/x", headers=busy)
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert "more than 3 requests this minute" in limited.json()["detail"]
    assert client.get("/documents/x", headers=quiet).status_code == 404
    assert client.get("/healthz").status_code == 200, "probes are never limited"


def test_the_rate_limit_lets_requests_through_when_redis_is_down(
    keyed_client: Callable[..., TestClient], db: Database, redis_server: LocalRedis
) -> None:
    client = keyed_client(api_key_rpm=1)
    key = bearer(create_api_key(db, "acme").plaintext)
    redis_server.stop()
    try:
        codes = [client.get("/documents/x", headers=key).status_code for _ in range(3)]
    finally:
        redis_server.start()
    assert codes == [404, 404, 404]
