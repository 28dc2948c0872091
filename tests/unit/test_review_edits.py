"""A reviewer's edits: applied by JSON Pointer, refused where they point at nothing,
checked against the schema per field, described as a per-field diff, and carried into the
evidence of a corrected value."""

from __future__ import annotations

import pytest

from docpipe.pipelines.edits import (
    Edit,
    EditError,
    ReviewerQuote,
    apply_edits,
    attach_quotes,
    carry_corrections,
    field_diff,
    schema_errors,
)
from docpipe.pipelines.evidence import evidence_records, support_label, unsupported_values

OUTPUT = {
    "fields": {"law": "Delaware", "total": {"amount": 100, "currency": "EUR"}, "parties": ["A"]},
    "evidence": [
        {"field": "law", "path": "/fields/law", "value": "Delaware", "quote": "Delaware law"},
        {
            "field": "total",
            "path": "/fields/total",
            "value": {"amount": 100, "currency": "EUR"},
            "quote": "EUR 100",
        },
    ],
}


def test_confirm_correct_and_clear() -> None:
    edited = apply_edits(
        OUTPUT,
        [
            Edit("/fields/law", "confirm"),
            Edit("/fields/total/amount", "correct", 120),
            Edit("/fields/parties/0", "correct", "A Ltd"),
            Edit("/fields/note", "correct", "new"),
            Edit("/fields/law", "clear"),
        ],
    )
    assert edited["fields"] == {
        "total": {"amount": 120, "currency": "EUR"},
        "parties": ["A Ltd"],
        "note": "new",
    }
    assert OUTPUT["fields"]["law"] == "Delaware"  # the original is left as it was


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (Edit("fields/law", "correct", 1), "a path is a JSON Pointer such as /fields/total/amount"),
        (Edit("/fields/nope/x", "correct", 1), "the output has no value 'nope' here"),
        (Edit("/fields/parties/3", "correct", "B"), "no item 3 in a list of 1"),
        (Edit("/fields/nope", "clear"), "there is no value here to clear"),
        (Edit("/fields/nope", "confirm"), "the output has no value 'nope' here"),
    ],
)
def test_an_edit_that_points_at_nothing_is_refused_with_its_path(edit: Edit, message: str) -> None:
    with pytest.raises(EditError) as caught:
        apply_edits(OUTPUT, [edit])
    [error] = caught.value.errors
    assert (error.path, error.message) == (edit.path, message)


def test_schema_errors_name_the_field() -> None:
    schema = {
        "type": "object",
        "properties": {
            "fields": {
                "type": "object",
                "properties": {
                    "total": {"type": "object", "properties": {"amount": {"type": "number"}}}
                },
            }
        },
    }
    broken = apply_edits(OUTPUT, [Edit("/fields/total/amount", "correct", "lots")])
    [error] = schema_errors(broken, schema)
    assert error.path == "/fields/total/amount"
    assert "'lots' is not of type 'number'" in error.message
    assert schema_errors(OUTPUT, schema) == []


def test_the_diff_names_each_changed_leaf() -> None:
    after = apply_edits(
        OUTPUT,
        [
            Edit("/fields/total/amount", "correct", 120),
            Edit("/fields/law", "clear"),
            Edit("/fields/note", "correct", "x"),
        ],
    )
    assert field_diff(OUTPUT["fields"], after["fields"]) == [
        {"path": "/law", "change": "removed", "before": "Delaware", "after": None},
        {"path": "/total/amount", "change": "changed", "before": 100, "after": 120},
        {"path": "/note", "change": "added", "before": None, "after": "x"},
    ]
    assert field_diff({"a": 1}, {"a": 1.0}) == [
        {"path": "/a", "change": "changed", "before": 1, "after": 1.0}
    ]
    assert field_diff(OUTPUT, OUTPUT) == []


def test_evidence_of_a_corrected_value_carries_it() -> None:
    after = apply_edits(
        OUTPUT, [Edit("/fields/total/amount", "correct", 120), Edit("/fields/law", "clear")]
    )
    carried = carry_corrections(OUTPUT, after, reviewer="Ada")
    law, total = carried["evidence"]
    assert law["value"] is None and law["corrected"] is True
    assert total["value"] == {"amount": 120, "currency": "EUR"} and total["corrected"] is True
    unchanged = carry_corrections(OUTPUT, apply_edits(OUTPUT, []), reviewer="Ada")
    assert all("corrected" not in r for r in unchanged["evidence"])


def test_a_corrected_value_names_its_reviewer_and_drops_the_old_quotes_support() -> None:
    located = {"start": 0, "end": 7, "page": 1, "section": "1", "section_title": "Law"}
    found = {**located, "supported": True, "support": "supported"}
    output = {**OUTPUT, "evidence": [{**r, **found} for r in OUTPUT["evidence"]]}
    after = apply_edits(output, [Edit("/fields/total/amount", "correct", 120)])
    law, total = carry_corrections(output, after, reviewer="Ada")["evidence"]
    assert total["corrected_by"] == "Ada" and support_label(total) == "corrected by Ada"
    assert total["supported"] is False and total["support"] == "corrected"
    assert total["model_quote"] == "EUR 100" and total["quote"] == ""
    assert [total[k] for k in located] == [None] * len(located)
    assert evidence_records({"s": {"evidence": [total]}}) == [total]  # still a record
    assert law == output["evidence"][0]  # a value left alone keeps its quote and support
    assert unsupported_values({"s": {"evidence": [total]}}) == []  # a person stands behind it


DOCUMENT = "This Agreement is governed by Delaware law. The price is EUR 120, payable at once."


def test_a_reviewers_quote_supports_a_corrected_value_and_names_the_reviewer() -> None:
    after = apply_edits(OUTPUT, [Edit("/fields/total/amount", "correct", 120)])
    after = carry_corrections(OUTPUT, after, reviewer="Ada")
    start = DOCUMENT.index("EUR 120")
    quoted = attach_quotes(
        after,
        [ReviewerQuote("/fields/total", start, start + len("EUR 120"))],
        document=DOCUMENT,
        page_starts=[0, 60],
        reviewer="Grace",
    )
    total = quoted["evidence"][1]
    assert (total["quote"], total["start"], total["page"]) == ("EUR 120", start, 1)
    assert (total["supported"], total["support"], total["quoted_by"]) == (
        True,
        "supported",
        "Grace",
    )
    assert (total["corrected_by"], total["model_quote"]) == ("Ada", "EUR 100")
    assert support_label(total) == "supported"


def test_a_reviewers_quote_the_value_is_not_in_is_not_support() -> None:
    start = DOCUMENT.index("payable at once")
    quoted = attach_quotes(
        apply_edits(OUTPUT, []),
        [ReviewerQuote("/fields/law", start, start + len("payable at once"))],
        document=DOCUMENT,
        page_starts=[0],
        reviewer="Grace",
    )
    law = quoted["evidence"][0]
    assert (law["supported"], support_label(law)) == (False, "quote found, value not in it")


@pytest.mark.parametrize(
    ("quote", "message"),
    [
        (ReviewerQuote("/fields/parties/0", 0, 4), "no evidence record holds this value"),
        (ReviewerQuote("/fields/law", 10, 10), "are not a passage of the document"),
        (ReviewerQuote("/fields/law", 80, 500), "are not a passage of the document"),
        (ReviewerQuote("/fields/law", 4, 5), "are not a passage of the document"),  # a space
    ],
)
def test_a_quote_that_cannot_be_one_is_refused_with_its_path(
    quote: ReviewerQuote, message: str
) -> None:
    with pytest.raises(EditError) as refused:
        attach_quotes(
            apply_edits(OUTPUT, []), [quote], document=DOCUMENT, page_starts=[0], reviewer="G"
        )
    assert refused.value.errors[0].path == quote.path
    assert message in refused.value.errors[0].message
