"""The review queue with real workers, PostgreSQL, Redis and the fake provider: runs pause
for a person, decisions carry them on without re-paying earlier steps, and a decision is
never asked for twice."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

ENDED = ("done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded")
CONTRACT = sample_contracts(1)[0]
# The fake provider answers a file step from its schema and the text it is sent: a claim
# whose only number is its amount is read with that amount, and quotes it word for word.
CLAIM = "{name} of Elm Street claims water damage to the kitchen worth {amount}"

_QUOTED_NUMBER = {
    "type": "object",
    "required": ["value", "quote"],
    "properties": {"value": {"type": "number"}, "quote": {"type": "string"}},
}
_READ_STEP = f"""\
  - name: read
    kind: ask
    prompt: "{{{{ document }}}}"
    evidence: fields
    output_schema:
      type: object
      required: [fields]
      properties:
        fields:
          type: object
          required: [amount]
          properties:
            amount: {_QUOTED_NUMBER}
"""
_DECIDE_STEP = """\
  - name: decide
    kind: reduce
    prompt: "Decide on a claim worth {{ outputs.read.fields.amount.value }}"
    output_schema:
      type: object
      required: [decision, amount]
      properties:
        decision: {type: string, enum: [pay, refuse]}
        amount: {type: number}
"""
PIPELINES = {
    # A rule on the amount, and the evidence the file asks docpipe to locate.
    "claims.yaml": "name: claims\nversion: 1\ndefaults: {model: gpt-4o-mini}\nsteps:\n"
    + _READ_STEP
    + "    review:\n      - {field: fields.amount.value, above: 1000}\n"
    + "      - unsupported_evidence\n"
    + _DECIDE_STEP,
    # Every decision is asked for (and reused on a re-run of the same input).
    "checked.yaml": "name: checked\nversion: 1\ndefaults: {model: gpt-4o-mini}\nsteps:\n"
    + _READ_STEP
    + _DECIDE_STEP
    + "    review: always\n",
    # Half the documents, chosen by the document.
    "sampled.yaml": "name: sampled\nversion: 1\ndefaults: {model: gpt-4o-mini}\nsteps:\n"
    + _READ_STEP
    + "    review:\n      - {sample: 0.5}\n",
}


@pytest.fixture
def stack(
    db: Database,
    tmp_path: Path,
    make_api_client: Callable[..., TestClient],
    start_worker: Callable[..., ManagedProcess],
    fake_llm: FakeLLM,
) -> TestClient:
    """The API in-process and one worker process, both loading the test's pipeline files."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    for name, text in PIPELINES.items():
        (folder / name).write_text(text)
    start_worker(concurrency=2, DOCPIPE_PIPELINES_DIR=str(folder))
    return make_api_client(pipelines_dir=str(folder))


def start(client: TestClient, text: str, pipeline: str, document_id: str, key: str = "") -> str:
    stored = client.put(
        f"/documents/{document_id}", content=text.encode(), headers={"Content-Type": "text/plain"}
    )
    assert stored.status_code in (200, 201), stored.text
    key = key or f"{document_id}-{pipeline}"
    started = client.post(
        f"/documents/{document_id}/extract",
        json={"pipeline": pipeline},
        headers={"Idempotency-Key": key},
    )
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def settled(client: TestClient, run_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/runs/{run_id}").json()
        return body if body["status"] in ENDED else None

    found: dict[str, Any] = wait_until(ended, timeout_s=90, every_s=0.1)
    return found


def decide(client: TestClient, run_id: str, **decision: Any) -> Any:
    if "revision" not in decision:
        decision["revision"] = client.get(f"/reviews/{run_id}").json()["review"]["revision"]
    return client.post(f"/runs/{run_id}/review", json=decision)


def calls(db: Database, run_id: str, step: str | None = None) -> int:
    if step is None:
        return int(scalar(db, "SELECT count(*) FROM llm_call_log WHERE run_id = %s", run_id))
    sql = "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND step = %s"
    return int(scalar(db, sql, run_id, step))


def test_a_rule_pauses_after_its_step_and_the_fix_flows_into_the_next(
    stack: TestClient, db: Database
) -> None:
    run_id = start(stack, CLAIM.format(name="Jane Roe", amount=1500), "claims:v1", "claim-1")
    paused = settled(stack, run_id)
    assert paused["status"] == "needs_review"
    assert paused["review"]["step"] == "read" and paused["review"]["reason"] == "rule"
    [reason] = paused["review"]["reasons"]
    assert (reason["kind"], reason["field"]) == ("above", "fields.amount.value")
    assert reason["message"] == "fields.amount.value is 1500, above 1000"
    assert {s["step"]: s["status"] for s in paused["steps"]}["decide"] == "pending"
    assert calls(db, run_id) == 1  # decide was never asked

    queue = stack.get("/reviews", params={"pipeline": "claims:v1", "reason": "rule"}).json()
    assert [r["run_id"] for r in queue["reviews"]] == [run_id]
    detail = stack.get(f"/reviews/{run_id}").json()
    assert detail["output"]["fields"]["amount"]["value"] == 1500
    assert detail["evidence"][0]["supported"] is True
    assert detail["document_text"] == CLAIM.format(name="Jane Roe", amount=1500)

    correction = {"path": "/fields/amount/value", "action": "correct", "value": 900}
    decided = decide(stack, run_id, action="approve", edits=[correction])
    assert decided.status_code == 200, decided.text
    done = settled(stack, run_id)
    assert done["status"] == "done"
    assert done["result"]["decide"]["amount"] == 900  # the reviewer's value reached the next step
    assert {s["step"]: s["reviewed"] for s in done["steps"]}["read"] == "approved"
    assert (calls(db, run_id, "read"), calls(db, run_id, "decide")) == (1, 1)
    [decision] = done["decisions"]
    assert decision["action"] == "approve" and decision["reviewer_name"] == "anonymous"
    assert decision["diff"] == [
        {"path": "/fields/amount/value", "change": "changed", "before": 1500, "after": 900}
    ]
    [value] = done["values"]
    assert (value["field"], value["value"], value["corrected"]) == ("fields.amount", 900, True)
    # The reviewer stands behind it now, not the model's quote (which held 1500).
    assert (value["corrected_by"], value["support"], value["supported"]) == (
        "anonymous",
        "corrected",
        False,
    )
    assert "1500" in value["model_quote"] and value["quote"] == "" and value["start"] is None


def test_a_file_pipeline_with_evidence_reaches_review_on_an_invented_quote(
    stack: TestClient, fake_llm: FakeLLM
) -> None:
    # The fake provider knows no file step by name: its first call is read's.
    fake_llm.add_fault("invented_quote", count=1)
    # An amount under the threshold: only the evidence rule can ask for a person.
    run_id = start(stack, CLAIM.format(name="John Doe", amount=300), "claims:v1", "claim-2")
    paused = settled(stack, run_id)
    assert paused["status"] == "needs_review"
    assert [r["kind"] for r in paused["review"]["reasons"]] == ["unsupported_evidence"]
    [value] = paused["values"]
    assert (value["field"], value["supported"], value["start"]) == ("fields.amount", False, None)


def test_an_approval_is_reused_on_a_rerun_and_not_once_an_earlier_step_changed(
    stack: TestClient, db: Database, fake_llm: FakeLLM
) -> None:
    text = CLAIM.format(name="Mary Major", amount=700)
    first = start(stack, text, "checked:v1", "claim-3", key="first")
    assert settled(stack, first)["review"]["step"] == "decide"
    assert decide(stack, first, action="approve").status_code == 200
    assert settled(stack, first)["status"] == "done"

    again = settled(stack, start(stack, text, "checked:v1", "claim-3", key="again"))
    assert again["status"] == "done"  # nobody was asked
    assert {s["step"]: s["reviewed"] for s in again["steps"]}["decide"] == "reused"
    assert calls(db, again["run_id"], "decide") == 0
    assert again["result"]["decide"] == settled(stack, first)["result"]["decide"]

    # A third run whose first step a person corrects reads another input at decide.
    fake_llm.add_fault("invalid", count=10)  # its first call is read's
    third = start(stack, text, "checked:v1", "claim-3", key="third")
    paused = settled(stack, third)
    assert (paused["review"]["step"], paused["review"]["reason"]) == ("read", "invalid_output")
    fake_llm.reset()
    output = {"fields": {"amount": {"value": 650, "quote": "worth 700"}}}
    assert decide(stack, third, action="approve", output=output).status_code == 200
    again_paused = settled(stack, third)
    assert (again_paused["status"], again_paused["review"]["step"]) == ("needs_review", "decide")
    assert again_paused["result"] is None


def test_sampling_picks_the_same_documents_on_every_run(stack: TestClient) -> None:
    names = [
        "Ann Lee",
        "Bob Stone",
        "Carl Ray",
        "Dee Moss",
        "Eve Hart",
        "Fay Wray",
        "Gus Hale",
        "Hal Vine",
        "Ida Bell",
        "Jon Kirk",
    ]
    paused: list[set[str]] = []
    for attempt in ("first", "second"):
        run_ids = {
            start(
                stack,
                CLAIM.format(name=n, amount=100),
                "sampled:v1",
                f"s-{i}",
                key=f"{attempt}-{i}",
            ): f"s-{i}"
            for i, n in enumerate(names)
        }
        ended = {run_id: settled(stack, run_id)["status"] for run_id in run_ids}
        paused.append({run_ids[r] for r, status in ended.items() if status == "needs_review"})
        assert set(ended.values()) <= {"done", "needs_review"}
    assert paused[0] == paused[1]
    assert 0 < len(paused[0]) < len(names)


@pytest.fixture
def invalid_summary(stack: TestClient, db: Database, fake_llm: FakeLLM) -> tuple[str, int]:
    """A document_extract run whose summary stays outside its schema on both models: it
    waits in review at summarize. Returns the run and the calls it made."""
    fake_llm.add_fault("invalid", count=4, step="summarize")
    run_id = start(stack, CONTRACT.text, "document_extract:v1", "contract")
    paused = settled(stack, run_id)
    assert (paused["status"], paused["review"]["step"]) == ("needs_review", "summarize")
    assert paused["review"]["reason"] == "invalid_output"
    fake_llm.reset()
    return run_id, calls(db, run_id)


SUMMARY = {"summary": "A services agreement.", "key_points": ["12 months"], "risk_flags": []}


def test_an_approved_output_ends_the_run_done_without_re_running_earlier_steps(
    stack: TestClient, db: Database, invalid_summary: tuple[str, int]
) -> None:
    run_id, paid = invalid_summary
    detail = stack.get(f"/reviews/{run_id}").json()
    assert detail["output"] is None and detail["errors"]
    assert set(detail["input"]) == {"extract_text", "extract_sections", "extract_fields"}
    assert decide(stack, run_id, action="approve", output=SUMMARY).status_code == 200
    done = settled(stack, run_id)
    assert (done["status"], done["result"]["summarize"]) == ("done", SUMMARY)
    assert calls(db, run_id) == paid  # nothing was sent again


def test_retry_with_another_model(
    stack: TestClient, db: Database, invalid_summary: tuple[str, int]
) -> None:
    run_id, _ = invalid_summary
    before = calls(db, run_id, "extract_fields")
    assert decide(stack, run_id, action="retry", model="gpt-4o").status_code == 200
    done = settled(stack, run_id)
    assert done["status"] == "done"
    retried = "WHERE run_id = %s AND step = 'summarize' AND generation = 1"
    models = scalar(
        db, f"SELECT string_agg(DISTINCT model, ',') FROM llm_call_log {retried}", run_id
    )
    assert models == "gpt-4o"
    assert calls(db, run_id, "extract_fields") == before
    assert done["decisions"][0]["retry_model"] == "gpt-4o"


def test_reject_ends_the_run_failed_with_the_reason(
    stack: TestClient, invalid_summary: tuple[str, int]
) -> None:
    run_id, _ = invalid_summary
    assert decide(stack, run_id, action="reject").status_code == 422  # a reason is required
    assert decide(stack, run_id, action="reject", reason="not a contract").status_code == 200
    failed = stack.get(f"/runs/{run_id}").json()
    assert failed["status"] == "failed"
    assert failed["error"] == "rejected by anonymous at step summarize: not a contract"
    assert failed["review"] is None and failed["decisions"][0]["action"] == "reject"
    again = decide(stack, run_id, action="approve", output=SUMMARY, revision=2)
    assert again.status_code == 409 and "awaits no review" in again.json()["detail"]


def test_of_two_reviewers_the_first_wins_and_a_stale_revision_is_refused(
    stack: TestClient, invalid_summary: tuple[str, int]
) -> None:
    run_id, _ = invalid_summary
    revision = stack.get(f"/reviews/{run_id}").json()["review"]["revision"]
    answers: list[Any] = []
    barrier = threading.Barrier(2)

    def review(action: dict[str, Any]) -> None:
        barrier.wait()
        answers.append(stack.post(f"/runs/{run_id}/review", json={"revision": revision, **action}))

    both = ({"action": "approve", "output": SUMMARY}, {"action": "reject", "reason": "no"})
    threads = [threading.Thread(target=review, args=(a,)) for a in both]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a.status_code for a in answers) == [200, 409]
    won, lost = sorted(answers, key=lambda a: a.status_code)
    body = lost.json()
    [first] = body["decisions_since"]
    assert first["action"] == ("approve" if won.json()["status"] != "failed" else "reject")
    assert body["current_revision"] == revision + 1
    assert f"not {revision}: anonymous decided {first['action']}" in body["detail"]


def test_bad_decisions_change_nothing(
    stack: TestClient, db: Database, invalid_summary: tuple[str, int]
) -> None:
    run_id, _ = invalid_summary
    revision = stack.get(f"/reviews/{run_id}").json()["review"]["revision"]
    broken = decide(stack, run_id, action="approve", output={**SUMMARY, "key_points": []})
    assert broken.status_code == 422
    assert broken.json()["errors"] == [{"path": "/key_points", "message": "[] should be non-empty"}]
    unknown = decide(stack, run_id, action="retry", model="gpt-9")
    assert unknown.status_code == 422 and "unknown model 'gpt-9'" in unknown.json()["detail"]
    unknown_step = decide(stack, run_id, action="retry", from_step="nope")
    assert unknown_step.status_code == 422, "no pipeline has it"
    elsewhere = decide(stack, run_id, action="retry", from_step="verdict")
    assert elsewhere.status_code == 409, "a step of another pipeline: the run says no"
    assert "has no step 'verdict'" in elsewhere.json()["detail"]
    stale = decide(stack, run_id, action="approve", output=SUMMARY, revision=revision - 1)
    assert stale.status_code == 409 and stale.json()["current_revision"] == revision
    assert decide(stack, run_id, action="ok").status_code == 422
    unrouted = stack.post(f"/runs/{run_id}/review", content=b"revision=1")
    assert unrouted.status_code == 415
    huge = {"summary": "x" * 1_000_000, "key_points": ["12 months"], "risk_flags": []}
    too_big = decide(stack, run_id, action="approve", output=huge, revision=revision)
    assert too_big.status_code == 413
    assert too_big.json()["detail"] == (
        "the body is larger than the limit of 1000000 bytes (DOCPIPE_MAX_DECISION_BYTES)"
    )
    # PostgreSQL stores no NUL character in text or jsonb: refused, not a 500.
    for nul in (
        {"action": "reject", "reason": "why\u0000"},
        {"action": "approve", "output": {**SUMMARY, "summary": "a\u0000b"}},
    ):
        refused = decide(stack, run_id, revision=revision, **nul)
        assert refused.status_code == 422, refused.text
        assert "NUL" in refused.json()["detail"]
    review = stack.get(f"/reviews/{run_id}").json()["review"]
    assert review["revision"] == revision  # nothing changed
    assert scalar(db, "SELECT count(*) FROM review_decision") == 0


def test_another_tenants_run_is_not_found_and_the_reviewer_is_the_keys_name(
    db: Database,
    tmp_path: Path,
    make_api_client: Callable[..., TestClient],
    start_worker: Callable[..., ManagedProcess],
    fake_llm: FakeLLM,
) -> None:
    start_worker(concurrency=2)
    client = make_api_client(auth="keys")
    ours = create_api_key(db, "acme", "Dana (legal)").plaintext
    theirs = create_api_key(db, "globex", "other").plaintext
    fake_llm.add_fault("invalid", count=4, step="summarize")
    client.headers["Authorization"] = f"Bearer {ours}"
    run_id = start(client, CONTRACT.text, "document_extract:v1", "contract")
    assert settled(client, run_id)["status"] == "needs_review"
    client.headers["Authorization"] = f"Bearer {theirs}"
    assert client.get(f"/reviews/{run_id}").status_code == 404
    assert client.get("/reviews").json()["reviews"] == []
    assert decide(client, run_id, action="reject", reason="x", revision=1).status_code == 404
    client.headers["Authorization"] = f"Bearer {ours}"
    assert decide(client, run_id, action="reject", reason="duplicate").status_code == 200
    [decision] = client.get(f"/runs/{run_id}").json()["decisions"]
    assert decision["reviewer_name"] == "Dana (legal)"
    assert decision["reviewer_key_id"] == ours.split("_")[1]


def test_a_reviewer_attaches_a_passage_as_a_values_quote(
    stack: TestClient, db: Database, fake_llm: FakeLLM
) -> None:
    fake_llm.add_fault("invented_quote", count=1)
    text = CLAIM.format(name="Jane Roe", amount=300)
    run_id = start(stack, text, "claims:v1", "claim-quoted")
    assert settled(stack, run_id)["status"] == "needs_review"
    path = stack.get(f"/reviews/{run_id}").json()["evidence"][0]["path"]
    start_at = text.index("worth 300")
    # A passage outside the document, or of a value no record holds: refused, nothing changes.
    wrong = decide(
        stack,
        run_id,
        action="approve",
        quotes=[
            {"path": path, "start": len(text), "end": len(text) + 5},
            {"path": "/fields/other", "start": 0, "end": 4},
        ],
    )
    assert wrong.status_code == 422, wrong.text
    assert [e["path"] for e in wrong.json()["errors"]] == [path, "/fields/other"]
    assert scalar(db, "SELECT count(*) FROM review_decision") == 0
    quote = {"path": path, "start": start_at, "end": start_at + len("worth 300")}
    approved = decide(stack, run_id, action="approve", quotes=[quote])
    assert approved.status_code == 200, approved.text
    [value] = settled(stack, run_id)["values"]
    assert (value["quote"], value["start"], value["quoted_by"]) == (
        "worth 300",
        start_at,
        "anonymous",
    )
    assert (value["supported"], value["support"]) == (True, "supported")
