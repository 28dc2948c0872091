"""Documents can be deleted: by their tenant (DELETE /documents/{id}) and by retention,
never while a run that uses them goes on. Real PostgreSQL and Redis, the API in-process."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from tests.support.factories import scalar

TEXT = "SUPPLY AGREEMENT\nPreamble.\n1. PRICE\nThe price is 100 EUR.\n"


def bearer(db: Database, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_api_key(db, tenant).plaintext}"}


def store(client: TestClient, document_id: str, headers: dict[str, str]) -> None:
    stored = client.put(
        f"/documents/{document_id}",
        content=TEXT.encode(),
        headers={"Content-Type": "text/plain", **headers},
    )
    assert stored.status_code == 201


def test_a_document_is_deleted_with_its_ended_runs_and_is_gone(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    store(client, "nda-1", {})
    run_id = client.post("/documents/nda-1/extract").json()["run_id"]
    assert client.post(f"/runs/{run_id}/cancel").status_code == 200

    deleted = client.delete("/documents/nda-1")

    assert (deleted.status_code, deleted.content) == (204, b"")
    assert client.get("/documents/nda-1").status_code == 404
    assert client.get(f"/runs/{run_id}").status_code == 404
    assert scalar(db, "SELECT count(*) FROM document") == 0
    assert scalar(db, "SELECT count(*) FROM pipeline_step_result") == 0
    assert client.delete("/documents/nda-1").status_code == 404, "deleting twice: 404"
    # The id is free again.
    store(client, "nda-1", {})


def test_a_document_an_active_run_uses_is_refused_with_409_naming_the_run(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    store(client, "nda-2", {})
    run_id = client.post("/documents/nda-2/extract").json()["run_id"]  # queued: no worker

    refused = client.delete("/documents/nda-2")

    assert refused.status_code == 409
    assert run_id in refused.json()["detail"]
    assert client.get("/documents/nda-2").status_code == 200
    assert client.get(f"/runs/{run_id}").json()["status"] == "queued"
    # Once the run has ended, the same request deletes it.
    client.post(f"/runs/{run_id}/cancel")
    assert client.delete("/documents/nda-2").status_code == 204


def test_a_batch_run_not_yet_ended_keeps_its_document(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client()
    batch = client.post("/batches", json={"documents": [{"id": "in-batch", "text": TEXT}]})
    assert batch.status_code == 202
    refused = client.delete("/documents/in-batch")
    assert refused.status_code == 409
    run_id = scalar(db, "SELECT id::text FROM pipeline_run")
    assert run_id in refused.json()["detail"]


def test_another_tenants_document_and_unknown_ids_are_404_and_nothing_changes(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(auth="keys")
    acme, globex = bearer(db, "acme"), bearer(db, "globex")
    store(client, "shared-name", acme)

    assert client.delete("/documents/shared-name", headers=globex).status_code == 404
    assert client.delete("/documents/never-stored", headers=acme).status_code == 404
    assert client.delete("/documents/bad%0Aid", headers=acme).status_code == 404
    assert client.get("/documents/shared-name", headers=acme).status_code == 200
    assert scalar(db, "SELECT count(*) FROM document") == 1
