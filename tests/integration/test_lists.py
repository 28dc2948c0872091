"""Finding past work through the API: GET /runs and GET /batches list a tenant's runs and
batches newest first, a page at a time, with filters; other tenants' work never shows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state import runs
from docpipe.state.db import Database
from tests.support.factories import new_run, scalar

TENANT = "default"  # the API's tenant without keys
STEP = DOCUMENT_EXTRACT.step_names[1]
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def api(make_api_client: Callable[..., TestClient]) -> TestClient:
    return make_api_client()


def made(db: Database, document_id: str, minutes: int, **options: Any) -> str:
    """A run of ``document_id`` created ``minutes`` after T0 (ordered, whatever the clock)."""
    run_id = new_run(db, document_id=document_id, key=document_id, tenant_id=TENANT).run_id
    at = T0 + timedelta(minutes=minutes)
    scalar(db, "UPDATE pipeline_run SET created_at = %s WHERE id = %s RETURNING 1", at, run_id)
    return run_id


def to_review(db: Database, run_id: str) -> None:
    """Pause the run for a person at its current step, as a worker does (under its lease)."""
    claim = runs.claim_step(db, run_id, STEP, owner="w", lease_s=30)
    assert claim is not None, run_id
    assert runs.fail_run(
        db, run_id, STEP, owner="w", status="needs_review", error="x", review_reason="rule"
    )


def listed(api: TestClient, **params: Any) -> list[str]:
    answer = api.get("/runs", params=params)
    assert answer.status_code == 200, answer.text
    return [r["document_id"] for r in answer.json()["runs"]]


def test_runs_are_listed_newest_first_a_page_at_a_time(api: TestClient, db: Database) -> None:
    names = [f"contract-{i}.txt" for i in range(7)]
    for minutes, name in enumerate(names):
        made(db, name, minutes)
    new_run(db, document_id="theirs.txt", key="theirs", tenant_id="other")  # another tenant's
    seen: list[str] = []
    cursor = None
    for expected in (3, 3, 1):
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = api.get("/runs", params=params).json()
        assert len(page["runs"]) == expected
        seen += [r["document_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
    assert cursor is None
    assert seen == names[::-1]
    first = api.get("/runs", params={"limit": 1}).json()["runs"][0]
    assert first["status"] == "queued" and first["current_step"] == STEP
    assert (first["steps_done"], first["steps_total"], first["lane"]) == (1, 4, "interactive")
    assert first["created_at"].startswith("2026-11-01T09:06:00")


def test_runs_are_filtered_by_status_pipeline_batch_document_time_and_review(
    api: TestClient, db: Database
) -> None:
    waiting = made(db, "inv-1.pdf", 1)
    cancelled = made(db, "inv-2.pdf", 2)
    made(db, "invoice.pdf", 3)
    made(db, "a_b.txt", 4)
    made(db, "axb.txt", 5)
    assert runs.cancel_run(db, TENANT, cancelled)
    to_review(db, waiting)
    batch = api.post("/batches", json={"documents": [{"id": "b-1.txt", "text": "A.\n1. B\nC.\n"}]})
    assert batch.status_code == 202, batch.text
    batch_id = batch.json()["batch_id"]

    assert listed(api, status="cancelled") == ["inv-2.pdf"]
    assert listed(api, status="needs_review") == ["inv-1.pdf"]
    assert listed(api, document="inv-") == ["inv-2.pdf", "inv-1.pdf"]
    assert listed(api, document="inv") == ["invoice.pdf", "inv-2.pdf", "inv-1.pdf"]
    assert listed(api, document="inv-1.pdf") == ["inv-1.pdf"]
    assert listed(api, document="a_") == ["a_b.txt"]  # "_" is itself, not any character
    assert listed(api, batch_id=batch_id) == ["b-1.txt"]
    assert listed(api, pipeline="document_extract:v1", limit=2) == ["b-1.txt", "axb.txt"]
    assert listed(api, pipeline="nda_review:v1") == []
    window = {"created_after": "2026-11-01T09:02:00Z", "created_before": "2026-11-01T09:04:00Z"}
    assert listed(api, **window) == ["invoice.pdf", "inv-2.pdf"]
    assert listed(api, **window, document="inv-") == ["inv-2.pdf"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "finished"}, "query.status"),
        ({"cursor": "12.not-a-run"}, "query.cursor"),
        ({"limit": 0}, "query.limit"),
        ({"pipeline": "document_extract"}, "query.pipeline"),
        ({"document": "a b"}, "query.document"),
        ({"created_after": "2026-11-01T09:00:00"}, "query.created_after"),
        ({"created_before": "0.5"}, "query.created_before"),
    ],
)
def test_a_list_request_that_makes_no_sense_is_a_422_naming_it(
    api: TestClient, params: dict[str, Any], message: str
) -> None:
    answer = api.get("/runs", params=params)
    assert answer.status_code == 422, answer.text
    assert message in answer.json()["detail"]


def test_runs_by_id_still_answer_their_whole_status_those_the_filters_hold(
    api: TestClient, db: Database
) -> None:
    one, two = made(db, "one.txt", 0), made(db, "two.txt", 1)
    assert runs.cancel_run(db, TENANT, two)
    body = api.get("/runs", params={"ids": f"{two},{one}"}).json()
    assert [r["run_id"] for r in body["runs"]] == [two, one]
    assert "steps" in body["runs"][0] and "next_cursor" not in body
    queued = api.get("/runs", params={"ids": f"{two},{one}", "status": "queued"}).json()
    assert [r["run_id"] for r in queued["runs"]] == [one]
    named = api.get("/runs", params={"ids": f"{two},{one}", "document": "tw"}).json()
    assert [r["run_id"] for r in named["runs"]] == [two]
    # An empty range holds nothing.
    empty = {"created_after": "2026-11-01T09:00:00Z", "created_before": "2026-11-01T09:00:00Z"}
    assert api.get("/runs", params=empty).json()["runs"] == []


def test_batches_are_listed_newest_first_with_progress_cost_and_filters(
    api: TestClient, db: Database
) -> None:
    def submit(*names: str) -> str:
        documents = [{"id": n, "text": f"{n}\n1. ONE\nText.\n"} for n in names]
        answer = api.post("/batches", json={"documents": documents})
        assert answer.status_code == 202, answer.text
        return str(answer.json()["batch_id"])

    first = submit("a.txt", "b.txt", "c.txt")
    second = submit("d.txt")
    third = submit("e.txt", "f.txt")
    for n, batch_id in enumerate((first, second, third)):
        at = T0 + timedelta(hours=n)
        scalar(db, "UPDATE batch SET created_at = %s WHERE id = %s RETURNING 1", at, batch_id)
    assert api.post(f"/batches/{second}/cancel").status_code == 200
    in_first = scalar(db, "SELECT id::text FROM pipeline_run WHERE document_id = 'b.txt'")
    to_review(db, in_first)

    page = api.get("/batches", params={"limit": 2}).json()
    assert [b["batch_id"] for b in page["batches"]] == [third, second]
    rest = api.get("/batches", params={"cursor": page["next_cursor"]}).json()
    assert [b["batch_id"] for b in rest["batches"]] == [first] and rest["next_cursor"] is None
    [listed_first] = rest["batches"]
    assert listed_first["runs_by_status"] == {"queued": 2, "needs_review": 1}
    assert (listed_first["runs_total"], listed_first["runs_ended"]) == (3, 1)
    assert listed_first["runs_in_review"] == 1
    assert listed_first["cost_so_far_usd"] == 0 and listed_first["status"] == "running"

    def ids(**params: Any) -> list[str]:
        answer = api.get("/batches", params=params)
        assert answer.status_code == 200, answer.text
        return [b["batch_id"] for b in answer.json()["batches"]]

    assert ids(status="cancelled") == [second]
    assert ids(needs_review="true") == [first]
    assert ids(created_after="2026-11-01T10:00:00Z") == [third, second]
    assert ids(pipeline="document_extract:v1", created_before="2026-11-01T10:00:00Z") == [first]
    new_run(db, document_id="x.txt", key="x", tenant_id="other")
    assert api.get("/batches", params={"status": "paused"}).status_code == 422
