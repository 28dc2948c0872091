"""The review pages in-process against real PostgreSQL and Redis: the queue (oldest first,
filters, age), one review (the document's text a page at a time, the generated form with
each value's evidence, the history), and decisions from the form: approve with a
correction, a stale revision (409 on the page), an edit that breaks the schema (422 next
to the field), a page past the end, HTML escaped everywhere. (tests/browser clicks the same
pages in Chromium.)"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.review import Reason
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from tests.support.factories import new_run, scalar

EXTRACT, SECTIONS, FIELDS, SUMMARY = DOCUMENT_EXTRACT.step_names
TEXT = (
    "SUPPLY AGREEMENT\nBetween Acme <b>bold</b> GmbH and Beta.\n"
    "1. TERM\nThe term is twelve (12) months.\n"
    "2. PRICE\nThe total value is EUR 12,000.\n"
)
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def ui(make_api_client: Callable[..., TestClient], db: Database) -> TestClient:
    client = make_api_client(
        auth="keys", secrets_key=Fernet.generate_key().decode(), api_key_rpm=0, client_ip_rpm=0
    )
    client.follow_redirects = False
    page = client.get("/ui/sign-in")
    token = TOKEN.search(page.text)
    assert token is not None
    key = create_api_key(db, "acme", "Ada Reviewer").plaintext
    signed = client.post("/ui/sign-in", data={"api_key": key, "csrf_token": token.group(1)})
    assert signed.status_code == 303
    return client


def evidence(field: str, value: Any, quote: str) -> dict[str, Any]:
    start = TEXT.index(quote)
    return {
        "field": field,
        "path": f"/fields/{field}",
        "value": value,
        "quote": quote,
        "start": start,
        "end": start + len(quote),
        "page": 1,
        "section": "1",
        "section_title": "TERM",
        "supported": True,
    }


def run_in_review(db: Database, document_id: str = "doc-1", **fields: Any) -> str:
    """A run of document_extract paused after extract_fields, as a worker leaves it."""
    run_id = new_run(db, TEXT, document_id=document_id, key=document_id, tenant_id="acme").run_id
    output = {
        "fields": {
            "term_months": 12,
            "total_value": {"amount": 12000, "currency": "EUR"},
            "parties": [{"name": "Acme <b>bold</b> GmbH", "role": "supplier"}],
            **fields,
        },
        "found_in": {"term_months": "1"},
        "evidence": [
            evidence("term_months", 12, "twelve (12) months"),
            evidence("total_value", {"amount": 12000, "currency": "EUR"}, "EUR 12,000"),
        ],
    }
    for step, out, nxt, review in (
        (
            SECTIONS,
            {"sections": [{"number": "0", "title": "P", "start": 0, "end": len(TEXT)}]},
            FIELDS,
            (),
        ),
        (FIELDS, output, SUMMARY, [Reason("always", "a person checks every contract")]),
    ):
        claim = runs.claim_step(db, run_id, step, owner="w", lease_s=30)
        assert claim is not None
        runs.record_step_result(
            db,
            claim,
            owner="w",
            output=out,
            model="gpt-4o-mini",
            prompt_version=f"{step}@v1",
            next_step=nxt,
            review=review,
        )
    return run_id


def form_of(page: str) -> list[tuple[str, str]]:
    """The approve form's fields as a browser sends them (inputs and selected options)."""
    form = page.split('id="approve-form"', 1)[1].split("</form>", 1)[0]
    form = re.sub(r"<template.*?</template>", "", form, flags=re.S)
    fields = re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', form)
    for name, body in re.findall(r'<select[^>]*name="([^"]+)"[^>]*>(.*?)</select>', form, re.S):
        chosen = re.search(r'<option value="([^"]*)" selected>', body)
        fields.append((name, chosen.group(1) if chosen else ""))
    for name, text in re.findall(r'<textarea[^>]*name="([^"]+)"[^>]*>(.*?)</textarea>', form, re.S):
        fields.append((name, text))
    return [(html.unescape(n), html.unescape(v)) for n, v in fields]


def post_form(client: TestClient, url: str, fields: list[tuple[str, str]]) -> Any:
    """POST ``fields`` as a browser sends a form (names may repeat; order kept)."""
    return client.post(
        url,
        content=urlencode(fields),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )


def with_value(fields: list[tuple[str, str]], name: str, value: str) -> list[tuple[str, str]]:
    assert any(n == name for n, _ in fields), name
    return [(n, value if n == name else v) for n, v in fields]


def test_the_queue_lists_reviews_oldest_first_with_their_age_and_filters(
    ui: TestClient, db: Database
) -> None:
    first, second = run_in_review(db, "doc-a"), run_in_review(db, "doc-b")
    with db.session() as s:
        s.conn.execute(
            b"UPDATE pipeline_run SET review_since = now() - interval '3 hours' WHERE id = %s",
            (first,),
        )
    page = ui.get("/ui/reviews").text
    assert page.index(first[:8]) < page.index(second[:8])
    assert "3 h" in page and "2</strong> waiting, the oldest for 3 h" in page
    # A review every run gets is routine: no reason is shown for it.
    assert "a person checks every contract" not in page
    assert second[:8] not in ui.get("/ui/reviews?step=summarize").text
    assert first[:8] in ui.get("/ui/reviews?step=extract_fields&reason=rule&pipeline=").text
    refused = ui.get("/ui/reviews?reason=whim")
    assert refused.status_code == 422 and "reason" in refused.text


def test_a_review_shows_the_text_the_form_and_each_values_evidence(
    ui: TestClient, db: Database
) -> None:
    run_id = run_in_review(db)
    answer = ui.get(f"/ui/reviews/{run_id}")
    assert answer.status_code == 200, answer.text
    page = answer.text
    # HTML in the document and in the model's output is text, never markup.
    assert "<b>bold</b>" not in page
    assert page.count("Acme &lt;b&gt;bold&lt;/b&gt; GmbH") >= 2  # the text and the value
    assert 'name="value:/fields/term_months" type="number" value="12"' in page
    assert 'name="value:/fields/total_value/currency" type="text" value="EUR"' in page
    assert 'data-evidence="0"' in page and "✓ supported" in page
    assert "Show quote (page 1): “twelve (12) months”" in page
    assert '"path": "/fields/term_months"' in page  # the script's evidence data
    assert 'name="value:/evidence' not in page  # evidence is shown, not edited
    assert "No decision yet." in page


def test_a_routine_review_says_no_why_and_a_failed_step_says_what_went_wrong(
    ui: TestClient, db: Database
) -> None:
    routine = ui.get(f"/ui/reviews/{run_in_review(db)}").text
    # Reviewed every time: nothing to explain, nothing wrong.
    assert "Why:" not in routine and "What the step got wrong" not in routine
    assert "a person checks every contract" not in routine
    # Values as wide as they are (a 12 in a narrow box), the shortcuts listed.
    assert 'value="12" size="8"' in routine
    assert "<kbd>Ctrl</kbd>+<kbd>Enter</kbd></dt><dd>approve and go to the next review" in routine
    run = new_run(db, TEXT, document_id="doc-x", key="doc-x", tenant_id="acme").run_id
    claim = runs.claim_step(db, run, SECTIONS, owner="w", lease_s=30)
    assert claim is not None
    error = "the output stayed outside its schema: 'sections' is a required property"
    runs.fail_run(
        db,
        run,
        SECTIONS,
        owner="w",
        status="needs_review",
        error=error,
        review_reason="invalid_output",
        output={"parts": []},
    )
    failed = ui.get(f"/ui/reviews/{run}").text
    assert f"<strong>Why:</strong> {error.replace(chr(39), '&#39;')}</p>" in failed
    assert "What the step got wrong (1)" in failed
    assert "/: &#39;sections&#39; is a required property" in failed


def test_approving_a_correction_continues_the_run_and_is_on_record(
    ui: TestClient, db: Database
) -> None:
    run_id = run_in_review(db)
    page = ui.get(f"/ui/reviews/{run_id}").text
    sent = with_value(form_of(page), "value:/fields/term_months", "24")
    answer = post_form(ui, f"/ui/reviews/{run_id}", sent)
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == f"/ui/runs/{run_id}"
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id) == "queued"
    output = scalar(
        db,
        "SELECT output FROM pipeline_step_result WHERE run_id = %s AND step = %s",
        run_id,
        FIELDS,
    )
    assert output["fields"]["term_months"] == 24
    assert output["fields"]["total_value"] == {"amount": 12000, "currency": "EUR"}
    assert output["evidence"][0]["value"] == 24 and output["evidence"][0]["corrected"] is True
    diff = scalar(db, "SELECT diff FROM review_decision WHERE run_id = %s", run_id)
    assert [
        (d["path"], d["before"], d["after"]) for d in diff if d["path"].startswith("/fields")
    ] == [("/fields/term_months", 12, 24)]
    assert scalar(db, "SELECT reviewer_name FROM review_decision") == "Ada Reviewer"
    # The run goes on (its last step, as a worker records it); its page says who stands
    # behind the corrected value, and that the model's quote is not its support any more.
    claim = runs.claim_step(db, run_id, SUMMARY, owner="w", lease_s=30)
    assert claim is not None
    summary = {"summary": "s", "key_points": ["k"], "risk_flags": []}
    runs.record_step_result(
        db, claim, owner="w", output=summary, model=None, prompt_version="v", next_step=None
    )
    run_page = ui.get(f"/ui/runs/{run_id}").text
    term = run_page[run_page.index('<th scope="row">term_months</th>') :].split("</tr>")[0]
    assert 'data-support="corrected">corrected by Ada Reviewer</span>' in term
    assert "no longer its support: <q>twelve (12) months</q>" in term
    total = run_page[run_page.index('<th scope="row">total_value</th>') :].split("</tr>")[0]
    assert ">supported</span>" in total


def test_a_stale_form_shows_the_409_and_decides_nothing(ui: TestClient, db: Database) -> None:
    run_id = run_in_review(db)
    stale = form_of(ui.get(f"/ui/reviews/{run_id}").text)
    # Someone else sends it back first: the run is retried, and reviewed again later.
    retry = [(n, v) for n, v in stale if n in ("csrf_token", "revision")] + [("action", "retry")]
    assert post_form(ui, f"/ui/reviews/{run_id}", retry).status_code == 303
    answer = post_form(ui, f"/ui/reviews/{run_id}", stale)
    assert answer.status_code == 409
    assert "Ada Reviewer decided retry" in answer.text and "Nothing was decided" in answer.text
    assert "Traceback" not in answer.text
    assert scalar(db, "SELECT count(*) FROM review_decision WHERE run_id = %s", run_id) == 1


def test_an_edit_that_breaks_the_schema_is_shown_next_to_the_field(
    ui: TestClient, db: Database
) -> None:
    run_id = run_in_review(db)
    page = ui.get(f"/ui/reviews/{run_id}").text
    sent = with_value(form_of(page), "value:/fields/total_value/currency", "euros")
    sent = with_value(sent, "value:/fields/term_months", "twelve")
    answer = post_form(ui, f"/ui/reviews/{run_id}", sent)
    assert answer.status_code == 422
    field = answer.text.split('data-pointer="/fields/term_months"', 1)[1].split("</div>", 1)[0]
    assert "&#39;twelve&#39; is not a whole number" in field
    assert 'value="twelve"' in field  # what the reviewer typed is kept
    sent = with_value(form_of(page), "value:/fields/total_value/currency", "euros")
    answer = post_form(ui, f"/ui/reviews/{run_id}", sent)
    assert answer.status_code == 422
    field = answer.text.split('data-pointer="/fields/total_value/currency"', 1)[1]
    field = field.split("</div>", 1)[0]
    assert "does not match" in field and 'aria-invalid="true"' in field
    assert scalar(db, "SELECT count(*) FROM review_decision WHERE run_id = %s", run_id) == 0
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id) == "needs_review"


def test_a_page_past_the_end_is_an_error_on_the_page(ui: TestClient, db: Database) -> None:
    run_id = run_in_review(db)
    answer = ui.get(f"/ui/reviews/{run_id}?page=7")
    assert answer.status_code == 404
    assert "Page 7 does not exist: the document has 1 page. Showing page 1." in answer.text


def test_another_tenants_review_is_not_found(ui: TestClient, db: Database) -> None:
    theirs = new_run(db, TEXT, tenant_id="globex", document_id="x", key="x").run_id
    assert ui.get(f"/ui/reviews/{theirs}").status_code == 404
    token = TOKEN.search(ui.get("/ui/reviews").text)
    assert token is not None
    answer = ui.post(
        f"/ui/reviews/{theirs}",
        data={"csrf_token": token.group(1), "revision": "0", "action": "reject", "reason": "no"},
    )
    assert answer.status_code == 404
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", theirs) == "queued"


def test_reject_and_retry_decide_with_their_reason_and_model(ui: TestClient, db: Database) -> None:
    run_id = run_in_review(db)
    page = ui.get(f"/ui/reviews/{run_id}").text
    assert '<option value="gpt-4o">gpt-4o</option>' in page
    token = TOKEN.search(page)
    assert token is not None
    base = {"csrf_token": token.group(1), "revision": "1"}
    unknown = ui.post(f"/ui/reviews/{run_id}", data={**base, "action": "retry", "model": "gpt-9"})
    assert unknown.status_code == 422 and "unknown model" in unknown.text
    no_reason = ui.post(f"/ui/reviews/{run_id}", data={**base, "action": "reject"})
    assert no_reason.status_code == 422
    rejected = ui.post(
        f"/ui/reviews/{run_id}",
        data={**base, "action": "reject", "reason": "not <i>our</i> contract"},
    )
    assert rejected.status_code == 303
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id) == "failed"
    run_page = ui.get(f"/ui/runs/{run_id}").text
    assert (
        "rejected by Ada Reviewer at step extract_fields: not &lt;i&gt;our&lt;/i&gt; contract"
        in run_page
    )


def retry_from_the_run_page(ui: TestClient, run_id: str, from_step: str) -> Any:
    """The run page's "Retry run" form, sent with ``from_step`` chosen."""
    page = ui.get(f"/ui/runs/{run_id}").text
    assert f'<option value="{from_step}">' in page
    token = TOKEN.search(page)
    assert token is not None
    return ui.post(
        f"/ui/runs/{run_id}/retry", data={"csrf_token": token.group(1), "from_step": from_step}
    )


def test_the_run_pages_retry_starts_at_the_step_chosen(ui: TestClient, db: Database) -> None:
    run_id = run_in_review(db)
    runs.cancel_run(db, "acme", run_id)
    # Left alone, a retry would start at the first step not done (summarize).
    answer = retry_from_the_run_page(ui, run_id, SECTIONS)
    assert answer.status_code == 303, answer.text
    assert scalar(db, "SELECT current_step FROM pipeline_run WHERE id = %s", run_id) == SECTIONS
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id) == "queued"
    steps = {s.step: s.status for s in runs.run_progress(db, "acme", run_id).steps}
    assert steps == {EXTRACT: "done", SECTIONS: "pending", FIELDS: "pending", SUMMARY: "pending"}


def test_the_run_pages_retry_of_a_run_in_review_is_the_signed_in_reviewers_decision(
    ui: TestClient, db: Database
) -> None:
    run_id = run_in_review(db)
    answer = retry_from_the_run_page(ui, run_id, SECTIONS)
    assert answer.status_code == 303, answer.text
    with db.session() as s:
        decision = s.conn.execute(
            b"SELECT action, step, retry_from, reviewer_key_id, reviewer_name"
            b" FROM review_decision WHERE run_id = %s",
            (run_id,),
        ).fetchall()
    key_id = scalar(db, "SELECT id FROM api_key WHERE name = 'Ada Reviewer'")
    assert decision == [
        {
            "action": "retry",
            "step": FIELDS,
            "retry_from": SECTIONS,
            "reviewer_key_id": str(key_id),
            "reviewer_name": "Ada Reviewer",
        }
    ]
    assert scalar(db, "SELECT current_step FROM pipeline_run WHERE id = %s", run_id) == SECTIONS
