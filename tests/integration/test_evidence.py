"""Evidence through the API with real workers: every value's offsets point at its quote, an
invented quote is flagged and sends the run to review by document_extract's rule, and so
does a wrong value under a quote that is in the document ("quote found, value not in it")."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import httpx

from docpipe.pipelines.evidence import normalised
from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = sample_contracts(2)[1]
ENDED = ("done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded")


def extract(api: str) -> dict[str, Any]:
    """Upload the contract, start document_extract and wait for the run to end."""
    stored = httpx.put(
        f"{api}/documents/contract",
        content=CONTRACT.text.encode(),
        headers={"Content-Type": "text/plain"},
    )
    assert stored.status_code == 201, stored.text
    assert stored.json()["sha256"] == hashlib.sha256(CONTRACT.text.encode()).hexdigest()
    started = httpx.post(f"{api}/documents/contract/extract")
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]

    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(f"{api}/runs/{run_id}").json()
        return body if body["status"] in ENDED else None

    run: dict[str, Any] = wait_until(ended, timeout_s=90)
    return run


def test_every_value_comes_with_offsets_that_point_at_its_quote(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_worker()
    run = extract(api)
    assert (run["status"], run["error"]) == ("done", None)
    values = run["values"]
    assert {v["field"]: v["value"] for v in values} == CONTRACT.expected
    sections = run["result"]["extract_sections"]["sections"]
    for v in values:
        assert v["supported"] and v["page"] == 1, v
        quoted = CONTRACT.text[v["start"] : v["end"]]
        assert normalised(quoted) == normalised(v["quote"]), v
        section = next(s for s in sections if s["number"] == v["section"])
        assert section["start"] <= v["start"] < section["end"]
    # The fields the summary reads stay plain values.
    assert run["result"]["extract_fields"]["fields"] == CONTRACT.expected


def test_an_invented_quote_is_flagged_and_the_run_pauses_for_review_after_its_step(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> None:
    fake_llm.add_fault("invented_quote", count=100, step="extract_fields")
    api = start_api()
    start_worker()
    run = extract(api)
    assert run["status"] == "needs_review"
    assert run["error"].startswith(
        f"unsupported_evidence: {len(CONTRACT.expected)} value(s) their quote does not "
        "support: parties (quote not in the document), "
    )
    # It pauses after the step that read the values; the summary waits for a person.
    assert (run["steps_done"], run["steps_total"]) == (3, 4)
    assert run["review"]["step"] == "extract_fields"
    values = run["values"]
    assert {v["field"]: v["value"] for v in values} == CONTRACT.expected
    for v in values:
        assert v["supported"] is False
        assert (v["start"], v["end"], v["page"], v["section"]) == (None, None, None, None)
        assert "Schedule Z" in v["quote"]


def test_a_wrong_value_under_a_quote_found_in_the_document_is_not_supported(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """The issue's party "7." quoted as "7.": the quote is in the document, and that alone
    made the value "supported". The fake provider, told to be wrong about every value of
    extract_fields, keeps each quote and changes the value (or leaves it out)."""
    fake_llm.control(
        "POST", "/control/mistakes", json={"error_rates": {"extract_fields@v2": 1.0}, "seed": 5}
    )
    api = start_api()
    start_worker()
    run = extract(api)
    assert run["status"] == "needs_review"
    assert run["review"]["step"] == "extract_fields"
    wrong = [
        v for v in run["values"] if v["value"] != CONTRACT.expected.get(v["field"], v["value"])
    ]
    # Not counting a boolean: its quote supports it whatever it says (the documented rule).
    readable = [v for v in wrong if not isinstance(v["value"], bool)]
    assert readable, run["values"]
    for v in readable:
        assert (v["support"], v["supported"]) == ("value_not_in_quote", False), v
        quoted = CONTRACT.text[v["start"] : v["end"]]  # the quote was found, offsets and all
        assert normalised(quoted) == normalised(v["quote"]), v
    assert run["error"].startswith("unsupported_evidence: ")
    for v in readable:
        assert f"{v['field']} (quote found, value not in it)" in run["error"], run["error"]
