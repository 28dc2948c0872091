"""GET /batches/{id}/results: a batch's results as JSON lines and as CSV, streamed, filtered
and resumed; with real workers for runs that end done, failed, in review and cancelled, and
in-process for every refusal."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from docpipe.pipelines.columns import JOINER
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.factories import scalar
from tests.fakellm import FakeLLM
from tests.processes import wait_until

CONTRACTS = sample_contracts(3)
OMITTED = (
    "extract_sections.sections (an array of objects), extract_fields.fields.parties (an array "
    "of objects), extract_fields.found_in (keys the schema leaves open), extract_fields.evidence "
    "(an array of objects)"
)


def jsonl(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.text.endswith("\n") or response.text == ""
    return [json.loads(line) for line in response.text.splitlines()]


def csv_rows(response: httpx.Response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.text)))


@pytest.fixture
def finished_batch(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> tuple[str, str]:
    """(API URL, batch id) of a batch whose five runs ended: two done, one in review (its
    quotes invented), one failed (an empty document), one cancelled before it started."""
    api = start_api()
    documents = [
        {"id": "c-0", "text": CONTRACTS[0].text},
        {"id": "empty", "text": "\n"},
        {"id": "c-1", "text": CONTRACTS[1].text},
        {"id": "c-cancelled", "text": CONTRACTS[2].text},
        {"id": "c-2", "text": CONTRACTS[2].text},
    ]
    submitted = httpx.post(f"{api}/batches", json={"documents": documents})
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["batch_id"]
    runs = httpx.get(f"{api}/batches/{batch_id}/runs").json()["runs"]
    cancelled = next(r["run_id"] for r in runs if r["document_id"] == "c-cancelled")
    assert httpx.post(f"{api}/runs/{cancelled}/cancel").status_code == 200
    # Five sections' answers quote what the contract does not say: that run goes to review.
    # One worker process runs one step at a time, so they are all the first extract_fields'
    # (a contract has 14 sections; its preamble alone may state no field).
    fake_llm.add_fault("invented_quote", count=5, step="extract_fields")
    start_worker("batch", concurrency=1)
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM pipeline_run WHERE status IN "
                       "('queued', 'running')") == 0,
        timeout_s=120,
    )  # fmt: skip
    return api, batch_id


def test_a_batch_streams_as_json_lines_and_csv_filters_and_resumes(
    db: Database, finished_batch: tuple[str, str]
) -> None:
    api, batch_id = finished_batch
    url = f"{api}/batches/{batch_id}/results"
    lines = jsonl(httpx.get(url))

    assert [line["run_id"] for line in lines] == sorted(line["run_id"] for line in lines)
    by_id = {line["custom_id"]: line for line in lines}
    assert {d: (line["position"], line["status"], line["result"]["type"])
            for d, line in by_id.items()} == {
        "c-0": (0, "done", "succeeded"),
        "empty": (1, "failed", "failed"),
        "c-1": (2, "done", "succeeded"),
        "c-cancelled": (3, "cancelled", "cancelled"),
        "c-2": (4, "done", "succeeded"),
    } | {
        # Which contract met the invented quotes depends on which run asked first.
        d: (line["position"], "needs_review", "needs_review")
        for d, line in by_id.items() if line["status"] == "needs_review"
    }  # fmt: skip
    [paused] = [line for line in lines if line["status"] == "needs_review"]
    assert (paused["review"]["step"], paused["review"]["reason"]) == ("extract_fields", "rule")
    assert paused["error"].startswith("unsupported_evidence: ")
    assert any(not v["supported"] for v in paused["result"]["values"])
    assert all(line["decisions"] == [] for line in lines)
    assert all(line["review"] is None for line in lines if line is not paused)
    steps = ["extract_text", "extract_sections", "extract_fields", "summarize"]
    for line in lines:
        assert line["document_id"] == line["custom_id"]
        assert list(line["result"]["outputs"]) == steps
        assert line["cost_usd"] == float(
            scalar(db, "SELECT cost_usd FROM pipeline_run WHERE id = %s", line["run_id"])
        )
    for done in (line for line in lines if line["status"] == "done"):
        contract = CONTRACTS[int(done["custom_id"][-1])]
        assert done["error"] is None and done["finished_at"] is not None
        assert done["result"]["outputs"]["extract_fields"]["fields"] == contract.expected
        assert {v["field"]: v["value"] for v in done["result"]["values"]} == contract.expected
        assert all(v["supported"] for v in done["result"]["values"])
    assert by_id["empty"]["error"] == "the document is empty"
    assert by_id["empty"]["result"]["outputs"]["extract_sections"] is None
    # A known text's extract_text is done when its run is created; cancelling stops the rest.
    cancelled = by_id["c-cancelled"]["result"]["outputs"]
    assert cancelled["extract_text"]["format"] == "text"
    assert {cancelled[s] for s in steps[1:]} == {None}
    assert by_id["c-cancelled"]["cost_usd"] == 0.0

    # The CSV: one row per document, the fields as columns, what has none named.
    answer = httpx.get(url, params={"format": "csv"})
    rows = csv_rows(answer)
    assert answer.headers["x-docpipe-omitted-fields"] == OMITTED
    assert answer.headers["content-disposition"] == f'attachment; filename="batch-{batch_id}.csv"'
    assert [r["run_id"] for r in rows] == [line["run_id"] for line in lines]
    for row in rows:
        line = next(x for x in lines if x["run_id"] == row["run_id"])
        assert (row["document_id"], row["position"], row["result"], row["status"]) == (
            line["custom_id"], str(line["position"]), line["result"]["type"], line["status"],
        )  # fmt: skip
        assert float(row["cost_usd"]) == line["cost_usd"]
        if line["status"] == "done":
            fields = line["result"]["outputs"]["extract_fields"]["fields"]
            summary = line["result"]["outputs"]["summarize"]
            assert row["extract_fields.fields.contract_type"] == fields["contract_type"]
            assert row["extract_fields.fields.total_value.amount"] == str(
                fields["total_value"]["amount"]
            )
            assert row["extract_fields.fields.auto_renewal"] == str(fields["auto_renewal"]).lower()
            assert row["summarize.key_points"] == JOINER.join(summary["key_points"])
        elif line["status"] == "needs_review":  # paused after extract_fields, its output kept
            fields = line["result"]["outputs"]["extract_fields"]["fields"]
            assert row["extract_fields.fields.contract_type"] == fields["contract_type"]
            assert row["summarize.summary"] == ""
            assert row["review_reason"] == "rule"
        else:
            assert row["summarize.summary"] == row["extract_fields.fields.contract_type"] == ""
    assert "extract_fields.fields.parties" not in rows[0]

    # Filters: by typed result, several at once, or by run status.
    succeeded = jsonl(httpx.get(url, params={"status": "succeeded"}))
    assert [x["custom_id"] for x in succeeded] == [
        x["custom_id"] for x in lines if x["status"] == "done"
    ]
    stopped = csv_rows(httpx.get(url, params={"format": "csv", "status": "failed,cancelled"}))
    assert sorted(r["document_id"] for r in stopped) == ["c-cancelled", "empty"]
    assert jsonl(httpx.get(url, params={"status": "running"})) == []

    # Resuming after the second line gives the rest, in the same order.
    rest = jsonl(httpx.get(url, params={"after": lines[1]["run_id"]}))
    assert rest == lines[2:]
    tail = csv_rows(httpx.get(url, params={"format": "csv", "after": lines[3]["run_id"]}))
    assert [r["run_id"] for r in tail] == [lines[4]["run_id"]]

    # A person approves the paused run: it goes on to done, and the export says who decided.
    decision = {"revision": paused["review"]["revision"], "action": "approve"}
    approved = httpx.post(f"{api}/runs/{paused['run_id']}/review", json=decision)
    assert approved.status_code == 200, approved.text
    wait_until(lambda: httpx.get(f"{api}/runs/{paused['run_id']}").json()["status"] == "done",
               timeout_s=60)  # fmt: skip
    [line] = [x for x in jsonl(httpx.get(url)) if x["run_id"] == paused["run_id"]]
    assert (line["status"], line["result"]["type"], line["review"]) == ("done", "succeeded", None)
    [approval] = line["decisions"]
    assert (approval["action"], approval["step"], approval["reviewer_name"]) == (
        "approve", "extract_fields", "anonymous",
    )  # fmt: skip
    assert approval["revision"] == paused["review"]["revision"]
    [row] = [r for r in csv_rows(httpx.get(url, params={"format": "csv"}))
             if r["run_id"] == paused["run_id"]]  # fmt: skip
    assert (row["result"], row["decision"], row["decided_by"], row["review_reason"]) == (
        "succeeded", "approve", "anonymous", "",
    )  # fmt: skip


# --- refusals (in-process, no workers) ----------------------------------------------------


def submitted_batch(client: TestClient, pipeline: str = "document_extract:v1") -> str:
    body = {"documents": [{"id": "a", "text": CONTRACTS[0].text}], "pipeline": pipeline}
    answer = client.post("/batches", json=body)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["batch_id"])


def test_bad_parameters_are_refused_before_anything_streams(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    batch_id = submitted_batch(client)
    other = submitted_batch(client)
    other_run = client.get(f"/batches/{other}/runs").json()["runs"][0]["run_id"]
    url = f"/batches/{batch_id}/results"
    for params, status, detail in [
        ({"format": "xml"}, 422, "query.format: Input should be 'jsonl' or 'csv'"),
        ({"status": "done,finished"}, 422, "status: 'finished' is neither a result type nor"),
        ({"after": "not-a-run"}, 422, "query.after: Input should be a valid UUID"),
        ({"after": other_run}, 409, f"after: run {other_run} is not a run of batch {batch_id}"),
    ]:
        answer = client.get(url, params=params)
        assert answer.status_code == status, (params, answer.text)
        assert answer.json()["detail"].startswith(detail), answer.json()
    assert client.get("/batches/not-a-batch/results").status_code == 404


def test_another_tenants_batch_is_not_found(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(auth="keys")
    acme, globex = create_api_key(db, "acme"), create_api_key(db, "globex")
    client.headers["Authorization"] = f"Bearer {acme.plaintext}"
    batch_id = submitted_batch(client)
    assert client.get(f"/batches/{batch_id}/results").status_code == 200
    client.headers["Authorization"] = f"Bearer {globex.plaintext}"
    for fmt in ("jsonl", "csv"):
        answer = client.get(f"/batches/{batch_id}/results", params={"format": fmt})
        assert answer.status_code == 404, answer.text
        assert answer.json()["detail"] == f"batch {batch_id} does not exist"


def test_a_csv_of_a_pipeline_without_flat_fields_names_them_and_jsonl_still_works(
    make_api_client: Callable[..., TestClient], tmp_path: Path
) -> None:
    (tmp_path / "clauses.yaml").write_text(
        "name: clauses\nversion: 1\ndefaults: {model: gpt-4o-mini}\nsteps:\n"
        "  - name: clauses\n    kind: ask\n    instructions: Split the text into clauses.\n"
        '    prompt: "{{ document }}"\n    output_schema:\n      type: object\n'
        "      properties:\n        clauses:\n          type: array\n          maxItems: 9\n"
        "          items: {type: object, properties: {title: {type: string}}}\n"
        "        pairs: {type: array, items: {type: array, items: {type: string}}}\n"
    )
    client = make_api_client(pipelines_dir=str(tmp_path))
    batch_id = submitted_batch(client, pipeline="clauses:v1")
    answer = client.get(f"/batches/{batch_id}/results", params={"format": "csv"})
    assert answer.status_code == 409
    assert answer.json()["detail"] == (
        "clauses:v1's output has no field a CSV column can hold: clauses.clauses (an array of "
        "objects), clauses.pairs (an array of arrays); ask for format=jsonl"
    )
    [line] = [json.loads(x) for x in client.get(f"/batches/{batch_id}/results").text.splitlines()]
    assert (line["custom_id"], line["result"]["type"]) == ("a", "pending")
    outputs = line["result"]["outputs"]
    assert (outputs["extract_text"]["format"], outputs["clauses"]) == ("text", None)


def test_exports_beyond_the_process_limit_wait_for_a_free_slot(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client(max_result_exports=1)
    batch_id = submitted_batch(client)
    url = f"/batches/{batch_id}/results"
    for _ in range(2):
        assert client.get(url).status_code == 200, "an export that ended frees its slot"
    slots = client.app.state.docpipe.export_slots  # type: ignore[attr-defined]
    assert slots.acquire(blocking=False), "held as a download in progress would hold it"
    busy = client.get(url, params={"format": "csv"})
    assert busy.status_code == 503 and busy.headers["retry-after"] == "10"
    assert "DOCPIPE_MAX_RESULT_EXPORTS" in busy.json()["detail"]
    slots.release()
    assert client.get(url).status_code == 200
