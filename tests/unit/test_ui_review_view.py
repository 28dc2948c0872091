"""What the review page shows of a review (docpipe_api.ui.review_view): pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT, EXTRACTED_SCHEMA
from docpipe.state.reviews import ReviewDetail, ReviewSummary
from docpipe_api.ui.review_view import evidence_by_pointer, review_view

TEXT = "PAGE ONE\nThe term is twelve months.\fPAGE TWO\nThe price is EUR 5.\f"
STARTS = [0, TEXT.index("PAGE TWO")]


def record(field: str, quote: str, **extra: Any) -> dict[str, Any]:
    start = TEXT.find(quote)
    found = start >= 0
    return {
        "field": field,
        "value": None,
        "quote": quote,
        "start": start if found else None,
        "end": start + len(quote) if found else None,
        "page": (2 if start >= STARTS[1] else 1) if found else None,
        "section": None,
        "supported": found,
        **extra,
    }


def detail(evidence: list[dict[str, Any]], fmt: str = "text") -> ReviewDetail:
    summary = ReviewSummary(
        run_id="r",
        pipeline="document_extract:v1",
        document_id="d",
        batch_id=None,
        step="extract_fields",
        reason="rule",
        reasons=[],
        revision=3,
        waiting_since=datetime.now(UTC),
        error=None,
    )
    output = {
        "fields": {"term_months": 12, "total_value": {"amount": 5, "currency": "EUR"}},
        "found_in": {},
        "evidence": evidence,
    }
    return ReviewDetail(
        summary=summary,
        document_format=fmt,
        document_text=TEXT,
        page_starts=STARTS,
        input={},
        output=output,
        errors=[],
        evidence=evidence,
        output_schema=EXTRACTED_SCHEMA,
        history=[],
        models=["gpt-4o"],
    )


def test_records_are_placed_by_their_path_or_by_their_field() -> None:
    with_path = record("total_value", "EUR 5", path="/fields/total_value/amount")
    old_style = record("term_months", "twelve months")
    loose = record("note", "nowhere")
    found = evidence_by_pointer({"fields": {"term_months": 12}}, [with_path, old_style, loose])
    assert {p: [r["index"] for r in rs] for p, rs in found.items()} == {
        "/fields/total_value/amount": [0],
        "/fields/term_months": [1],
        "/note": [2],
    }


def test_the_first_page_shown_is_the_one_of_the_first_located_quote() -> None:
    view = review_view(
        detail([record("x", "not there"), record("total_value", "EUR 5")]),
        step_names=DOCUMENT_EXTRACT.step_names,
    )
    assert (view.page, view.page_error) == (2, None)
    assert [(p.number, p.start) for p in view.pages] == [(1, 0), (2, STARTS[1])]
    assert view.pages[1].text.startswith("PAGE TWO")
    assert view.retry_steps == ["extract_text", "extract_sections", "extract_fields"]
    assert not view.as_image
    assert [e["index"] for e in view.evidence] == [0, 1]
    assert "value" not in view.evidence[0]  # the script gets where, not what


def test_a_page_past_the_end_is_said_and_the_first_page_shown() -> None:
    view = review_view(detail([]), page=3)
    assert view.page == 1
    assert view.page_error == "Page 3 does not exist: the document has 2 pages. Showing page 1."
    assert review_view(detail([]), page=0).page_error is not None


def test_pdfs_and_images_are_shown_as_page_images_and_evidence_is_not_a_form_field() -> None:
    view = review_view(detail([record("term_months", "twelve months")], fmt="tiff"))
    assert view.as_image
    pointers = [f.pointer for f in view.form.walk()]
    assert "/fields/term_months" in pointers and not any(
        p.startswith("/evidence") for p in pointers
    )
    term = next(f for f in view.form.walk() if f.pointer == "/fields/term_months")
    assert [e["quote"] for e in term.evidence] == ["twelve months"]
