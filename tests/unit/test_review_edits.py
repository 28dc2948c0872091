"""A reviewer's edits: applied by JSON Pointer, refused where they point at nothing,
checked against the schema per field, described as a per-field diff, and carried into the
evidence of a corrected value."""

from __future__ import annotations

import pytest

from docpipe.pipelines.edits import (
    Edit,
    EditError,
    apply_edits,
    carry_corrections,
    field_diff,
    schema_errors,
)

OUTPUT = {
    "fields": {"law": "Delaware", "total": {"amount": 100, "currency": "EUR"}, "parties": ["A"]},
    "evidence": [
        {"field": "law", "path": "/fields/law", "value": "Delaware", "quote": "Delaware law"},
        {"field": "total", "path": "/fields/total", "value": {"amount": 100, "currency": "EUR"},
         "quote": "EUR 100"},
    ],
}  # fmt: skip


def test_confirm_correct_and_clear() -> None:
    edited = apply_edits(OUTPUT, [
        Edit("/fields/law", "confirm"),
        Edit("/fields/total/amount", "correct", 120),
        Edit("/fields/parties/0", "correct", "A Ltd"),
        Edit("/fields/note", "correct", "new"),
        Edit("/fields/law", "clear"),
    ])  # fmt: skip
    assert edited["fields"] == {"total": {"amount": 120, "currency": "EUR"},
                                "parties": ["A Ltd"], "note": "new"}  # fmt: skip
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
    schema = {"type": "object", "properties": {"fields": {"type": "object", "properties": {
        "total": {"type": "object", "properties": {"amount": {"type": "number"}}}}}}}  # fmt: skip
    broken = apply_edits(OUTPUT, [Edit("/fields/total/amount", "correct", "lots")])
    [error] = schema_errors(broken, schema)
    assert error.path == "/fields/total/amount"
    assert "'lots' is not of type 'number'" in error.message
    assert schema_errors(OUTPUT, schema) == []


def test_the_diff_names_each_changed_leaf() -> None:
    after = apply_edits(OUTPUT, [Edit("/fields/total/amount", "correct", 120),
                                 Edit("/fields/law", "clear"),
                                 Edit("/fields/note", "correct", "x")])  # fmt: skip
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
    after = apply_edits(OUTPUT, [Edit("/fields/total/amount", "correct", 120),
                                 Edit("/fields/law", "clear")])  # fmt: skip
    carried = carry_corrections(OUTPUT, after)
    law, total = carried["evidence"]
    assert law["value"] is None and law["corrected"] is True
    assert total["value"] == {"amount": 120, "currency": "EUR"} and total["corrected"] is True
    unchanged = carry_corrections(OUTPUT, apply_edits(OUTPUT, []))
    assert all("corrected" not in r for r in unchanged["evidence"])
