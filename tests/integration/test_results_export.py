"""GET /batches/{id}/results: a batch's results as JSON lines, CSV and XLSX (opened with
openpyxl), in the order the documents were sent, streamed, filtered and resumed; with real
workers for runs that end done, failed, in review and cancelled, a value a reviewer
corrected, and in-process for every refusal."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openpyxl
import pytest
from fastapi.testclient import TestClient

from docpipe.pipelines.columns import JOINER
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_api.xlsx import MEDIA_TYPE as XLSX_MEDIA_TYPE
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACTS = sample_contracts(3)
OMITTED = (
    "extract_fields.evidence (the values' evidence: ask for evidence=true, docpipe batch "
    "results --evidence)"
)
SENT = ["c-0", "empty", "c-1", "c-cancelled", "c-2"]


def jsonl(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.text.endswith("\n") or response.text == ""
    return [json.loads(line) for line in response.text.splitlines()]


def csv_rows(response: httpx.Response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.text)))


def xlsx_sheets(response: httpx.Response) -> dict[str, list[tuple[Any, ...]]]:
    """Each sheet's rows, as a spreadsheet program reads them (openpyxl)."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == XLSX_MEDIA_TYPE
    book = openpyxl.load_workbook(io.BytesIO(response.content), read_only=True)
    return {sheet.title: list(sheet.iter_rows(values_only=True)) for sheet in book}


def parties_cell(parties: list[dict[str, str]]) -> str:
    return "; ".join(f"{p['name']} ({p['role']})" for p in parties)


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
        lambda: (
            scalar(db, "SELECT count(*) FROM pipeline_run WHERE status IN ('queued', 'running')")
            == 0
        ),
        timeout_s=120,
    )
    return api, batch_id


def test_a_batch_streams_as_json_lines_and_csv_filters_and_resumes(
    db: Database, finished_batch: tuple[str, str]
) -> None:
    api, batch_id = finished_batch
    url = f"{api}/batches/{batch_id}/results"
    lines = jsonl(httpx.get(url))

    # In the order the documents were sent.
    assert [(line["position"], line["custom_id"]) for line in lines] == list(enumerate(SENT))
    by_id = {line["custom_id"]: line for line in lines}
    assert {
        d: (line["position"], line["status"], line["result"]["type"]) for d, line in by_id.items()
    } == {
        "c-0": (0, "done", "succeeded"),
        "empty": (1, "failed", "failed"),
        "c-1": (2, "done", "succeeded"),
        "c-cancelled": (3, "cancelled", "cancelled"),
        "c-2": (4, "done", "succeeded"),
    } | {
        # Which contract met the invented quotes depends on which run asked first.
        d: (line["position"], "needs_review", "needs_review")
        for d, line in by_id.items()
        if line["status"] == "needs_review"
    }
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

    # The CSV: one row per document in the order they were sent, titled columns (the
    # parties among them), the evidence named as left out until it is asked for.
    answer = httpx.get(url, params={"format": "csv"})
    rows = csv_rows(answer)
    assert answer.headers["x-docpipe-omitted-fields"] == OMITTED
    assert answer.headers["content-disposition"] == f'attachment; filename="batch-{batch_id}.csv"'
    assert list(rows[0])[:12] == [
        "Document",
        "No.",
        "Run ID",
        "Result",
        "Status",
        "Cost (USD)",
        "Error",
        "Review reason",
        "Decision",
        "Decided by",
        "Sections",
        "Parties",
    ]
    assert [r["Run ID"] for r in rows] == [line["run_id"] for line in lines]
    for row, line in zip(rows, lines, strict=True):
        assert (row["Document"], row["No."], row["Result"], row["Status"]) == (
            line["custom_id"],
            str(line["position"] + 1),
            line["result"]["type"],
            line["status"],
        )
        assert float(row["Cost (USD)"]) == line["cost_usd"]
        if line["status"] == "done":
            fields = line["result"]["outputs"]["extract_fields"]["fields"]
            summary = line["result"]["outputs"]["summarize"]
            assert row["Parties"] == parties_cell(fields["parties"])
            assert row["Contract type"] == fields["contract_type"]
            assert row["Total value: amount"] == str(fields["total_value"]["amount"])
            assert row["Auto renewal"] == str(fields["auto_renewal"]).lower()
            assert row["Key points"] == JOINER.join(summary["key_points"])
        elif line["status"] == "needs_review":  # paused after extract_fields, its output kept
            fields = line["result"]["outputs"]["extract_fields"]["fields"]
            assert row["Contract type"] == fields.get("contract_type", "")
            assert row["Summary"] == ""
            assert row["Review reason"] == "rule"
        else:
            assert row["Summary"] == row["Contract type"] == row["Parties"] == ""

    # Filters: by typed result, several at once, or by run status.
    succeeded = jsonl(httpx.get(url, params={"status": "succeeded"}))
    assert [x["custom_id"] for x in succeeded] == [
        x["custom_id"] for x in lines if x["status"] == "done"
    ]
    stopped = csv_rows(httpx.get(url, params={"format": "csv", "status": "failed,cancelled"}))
    assert [r["Document"] for r in stopped] == ["empty", "c-cancelled"]
    assert jsonl(httpx.get(url, params={"status": "running"})) == []

    # Resuming after the second line gives the rest, in the same order.
    rest = jsonl(httpx.get(url, params={"after": lines[1]["run_id"]}))
    assert rest == lines[2:]
    tail = csv_rows(httpx.get(url, params={"format": "csv", "after": lines[3]["run_id"]}))
    assert [r["Run ID"] for r in tail] == [lines[4]["run_id"]]

    # A person corrects a value of the paused run and approves it: it goes on to done, and
    # the export says who decided, and that the value is the reviewer's, not the quote's.
    fields = paused["result"]["outputs"]["extract_fields"]["fields"]
    name = next(k for k, v in fields.items() if isinstance(v, str))
    correction = {"path": f"/fields/{name}", "action": "correct", "value": "Set by a person"}
    decision = {
        "revision": paused["review"]["revision"],
        "action": "approve",
        "edits": [correction],
    }
    approved = httpx.post(f"{api}/runs/{paused['run_id']}/review", json=decision)
    assert approved.status_code == 200, approved.text
    wait_until(
        lambda: httpx.get(f"{api}/runs/{paused['run_id']}").json()["status"] == "done", timeout_s=60
    )
    [line] = [x for x in jsonl(httpx.get(url)) if x["run_id"] == paused["run_id"]]
    assert (line["status"], line["result"]["type"], line["review"]) == ("done", "succeeded", None)
    [approval] = line["decisions"]
    assert (approval["action"], approval["step"], approval["reviewer_name"]) == (
        "approve",
        "extract_fields",
        "anonymous",
    )
    assert approval["revision"] == paused["review"]["revision"]
    [value] = [v for v in line["result"]["values"] if v["field"] == name]
    assert (value["value"], value["corrected_by"], value["quote"]) == (
        "Set by a person",
        "anonymous",
        "",
    )
    title = name.replace("_", " ").capitalize()
    with_evidence = httpx.get(url, params={"format": "csv", "evidence": "true"})
    assert "x-docpipe-omitted-fields" not in with_evidence.headers
    [row] = [r for r in csv_rows(with_evidence) if r["Run ID"] == paused["run_id"]]
    assert (row["Result"], row["Decision"], row["Decided by"], row["Review reason"]) == (
        "succeeded",
        "approve",
        "anonymous",
        "",
    )
    assert (row[title], row[f"{title}: quote"], row[f"{title}: evidence"]) == (
        "Set by a person",
        "",
        "corrected by anonymous",
    )
    done = next(line for line in lines if line["status"] == "done")
    supported = next(v for v in done["result"]["values"] if v["field"] == "parties")
    [first] = [r for r in csv_rows(with_evidence) if r["Document"] == done["custom_id"]]
    # Evidence columns follow the values the step quotes, and no other (found_in says which
    # section stated each value: nothing quotes it).
    assert "Found in" in first and not any(t.startswith("Found in: ") for t in first)
    assert not any(t.startswith(("Summary: ", "Sections: ")) for t in first)
    assert (first["Parties: quote"], first["Parties: page"], first["Parties: evidence"]) == (
        supported["quote"],
        str(supported["page"]),
        "supported",
    )

    # The workbook: a values sheet as the CSV (titles, then the paths, then a row per
    # document in the order sent, numbers as numbers) and an evidence sheet, a row a value.
    book = httpx.get(url, params={"format": "xlsx"})
    assert book.headers["content-disposition"] == f'attachment; filename="batch-{batch_id}.xlsx"'
    assert book.headers["x-docpipe-omitted-fields"] == OMITTED
    sheets = xlsx_sheets(book)
    assert list(sheets) == ["Values", "Evidence"]
    titles, paths, *values = sheets["Values"]
    assert titles[:3] == ("Document", "No.", "Run ID")
    assert paths[:3] == ("document_id", "position", "run_id")
    column = dict(zip(titles, range(len(titles)), strict=True))
    assert paths[column["Parties"]] == "extract_fields.fields.parties"
    assert paths[column["Total value: amount"]] == "extract_fields.fields.total_value.amount"
    assert [(v[0], v[1]) for v in values] == [(d, n) for n, d in enumerate(SENT, start=1)]
    for document in ("c-0", "c-1", "c-2"):
        [row_values] = [v for v in values if v[0] == document]
        expected = CONTRACTS[int(document[-1])].expected
        assert row_values[column["Parties"]] == parties_cell(expected["parties"])
        assert row_values[column["Total value: amount"]] == expected["total_value"]["amount"]
        assert row_values[column["Auto renewal"]] is expected["auto_renewal"]
    evidence_titles, *evidence = sheets["Evidence"]
    assert evidence_titles == (
        "Document",
        "No.",
        "Field",
        "Value",
        "Quote",
        "Page",
        "Section",
        "Evidence",
        "Corrected by",
        "Run ID",
    )
    by_document = {d: [e for e in evidence if e[0] == d] for d in SENT}
    done_evidence = by_document[done["custom_id"]]
    assert sorted(e[2] for e in done_evidence) == sorted(
        f.replace("_", " ").capitalize() for f in CONTRACTS[0].expected
    )
    assert {e[7] for e in done_evidence} == {"supported"}
    assert by_document["empty"] == by_document["c-cancelled"] == []
    [corrected] = [e for e in evidence if e[9] == paused["run_id"] and e[2] == title]
    assert corrected[3:] == (
        "Set by a person",
        None,
        None,
        corrected[6],
        "corrected by anonymous",
        "anonymous",
        paused["run_id"],
    )
    [parties] = [e for e in done_evidence if e[2] == "Parties"]
    assert parties[3:6] == (
        parties_cell(done["result"]["outputs"]["extract_fields"]["fields"]["parties"]),
        supported["quote"],
        supported["page"],
    )


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
        ({"format": "xml"}, 422, "query.format: Input should be 'jsonl', 'csv' or 'xlsx'"),
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
    for fmt in ("jsonl", "csv", "xlsx"):
        answer = client.get(f"/batches/{batch_id}/results", params={"format": fmt})
        assert answer.status_code == 404, answer.text
        assert answer.json()["detail"] == f"batch {batch_id} does not exist"


def test_lists_of_objects_and_of_lists_are_cells_not_left_out(
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
    assert answer.status_code == 200, answer.text
    assert "x-docpipe-omitted-fields" not in answer.headers
    [row] = list(csv.DictReader(io.StringIO(answer.text)))
    assert (row["Document"], row["Result"], row["Clauses"], row["Pairs"]) == (
        "a",
        "pending",
        "",
        "",
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
