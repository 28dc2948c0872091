"""The review form generated from a step's output schema, and the output read back from it
(docpipe_api.ui.forms): a pure function pair, checked against JSON Schemas."""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from docpipe.pipelines.document_extract import EXTRACTED_SCHEMA, FIELDS_SCHEMA
from docpipe_api.ui.form_values import output_from_form
from docpipe_api.ui.forms import ITEM_PLACEHOLDER, Field, form_for

CONTRACT = {
    "fields": {
        "parties": [{"name": "Acme GmbH", "role": "supplier"}, {"name": "Beta", "role": "buyer"}],
        "contract_type": "supply",
        "effective_date": "2024-01-01",
        "term_months": 12,
        "total_value": {"amount": 12000.5, "currency": "EUR"},
        "auto_renewal": False,
    },
    "found_in": {"parties": "0", "term_months": "2"},
    "evidence": [
        {
            "field": "term_months",
            "value": 12,
            "quote": "twelve months",
            "start": 10,
            "end": 23,
            "page": 1,
            "section": "2",
            "section_title": "TERM",
            "supported": True,
        },
    ],
}


def browser_submits(root: Field, **changes: str) -> list[tuple[str, str]]:
    """What a browser sends for the form as rendered: each value input with its shown value
    (or the change asked for, by pointer), and each container's shape marker."""
    sent = []
    for field in root.walk():
        if field.kind in ("object", "array"):
            if field.present or field.required:
                sent.append((field.shape_name, field.kind))
        else:
            sent.append((field.input_name, changes.get(field.pointer, field.value)))
    return sent


def by_pointer(root: Field) -> dict[str, Field]:
    return {f.pointer: f for f in root.walk()}


def test_each_kind_of_value_gets_its_own_input() -> None:
    root, unplaced = form_for(EXTRACTED_SCHEMA, CONTRACT, hidden=("evidence",))
    fields = by_pointer(root)
    assert unplaced == []
    assert "/evidence" not in fields  # the evidence is shown beside values, not edited
    assert fields["/fields"].kind == "object"
    assert fields["/fields/parties"].kind == "array"
    assert [f.pointer for f in fields["/fields/parties"].children] == [
        "/fields/parties/0",
        "/fields/parties/1",
    ]
    assert fields["/fields/parties/1/name"].value == "Beta"
    item = fields["/fields/parties"].item
    assert item is not None and item.pointer == f"/fields/parties/{ITEM_PLACEHOLDER}"
    assert [c.label for c in item.children] == ["Name", "Role"]
    assert (fields["/fields/term_months"].kind, fields["/fields/term_months"].value) == (
        "integer",
        "12",
    )
    assert fields["/fields/term_months"].limits == {"min": 0}
    assert fields["/fields/total_value/amount"].kind == "number"
    assert fields["/fields/effective_date"].kind == "date"  # from its YYYY-MM-DD pattern
    assert (fields["/fields/auto_renewal"].kind, fields["/fields/auto_renewal"].value) == (
        "boolean",
        "false",
    )
    # Absent optional values are offered, empty.
    assert fields["/fields/liability_cap/amount"].value == ""
    assert not fields["/fields/liability_cap"].present
    # A map with open-ended keys is edited as JSON text.
    assert fields["/found_in"].kind == "json"


def test_enums_are_selects_and_refs_and_nullable_types_are_followed() -> None:
    schema = {
        "$defs": {"level": {"enum": ["low", "high", 3]}},
        "type": "object",
        "required": ["risk"],
        "properties": {
            "risk": {"$ref": "#/$defs/level"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "when": {"type": "string", "format": "date"},
            "odd": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        },
    }
    root, _ = form_for(schema, {"risk": 3, "note": None})
    fields = by_pointer(root)
    assert fields["/risk"].kind == "enum"
    assert fields["/risk"].options == [('"low"', "low"), ('"high"', "high"), ("3", "3")]
    assert fields["/risk"].value == "3"
    assert (fields["/note"].kind, fields["/note"].value) == ("text", "")
    assert fields["/when"].kind == "date"
    assert fields["/odd"].kind == "json"
    after, errors = output_from_form(schema, {}, browser_submits(root, **{"/risk": '"high"'}))
    assert (after, errors) == ({"risk": "high"}, [])


def test_an_unchanged_form_gives_back_the_output_it_was_made_from() -> None:
    root, _ = form_for(EXTRACTED_SCHEMA, CONTRACT, hidden=("evidence",))
    after, errors = output_from_form(
        EXTRACTED_SCHEMA, CONTRACT, browser_submits(root), hidden=("evidence",)
    )
    assert errors == []
    assert after == CONTRACT


def test_a_corrected_value_is_read_as_its_type_and_a_cleared_one_is_left_out() -> None:
    root, _ = form_for(EXTRACTED_SCHEMA, CONTRACT, hidden=("evidence",))
    sent = browser_submits(
        root,
        **{
            "/fields/total_value/amount": "15000",
            "/fields/term_months": "24",
            "/fields/contract_type": "",
            "/fields/auto_renewal": "true",
            "/fields/liability_cap/amount": "500.25",
            "/fields/liability_cap/currency": "USD",
        },
    )
    after, errors = output_from_form(EXTRACTED_SCHEMA, CONTRACT, sent, hidden=("evidence",))
    assert errors == []
    fields = after["fields"]
    assert fields["total_value"] == {"amount": 15000, "currency": "EUR"}
    assert fields["term_months"] == 24 and fields["auto_renewal"] is True
    assert "contract_type" not in fields
    assert fields["liability_cap"] == {"amount": 500.25, "currency": "USD"}
    assert after["evidence"] == CONTRACT["evidence"]  # kept as it was
    jsonschema.validate(after, EXTRACTED_SCHEMA)


def test_array_items_removed_and_added_in_the_browser_are_renumbered() -> None:
    root, _ = form_for(EXTRACTED_SCHEMA, CONTRACT, hidden=("evidence",))
    # The page's script removes the first item's element, its inputs and marker with it.
    sent = [
        (n, v)
        for n, v in browser_submits(root)
        if not n.split(":")[1].startswith("/fields/parties/0")
    ]
    # The page's script adds an item from the template, at an index after the others.
    item = by_pointer(root)["/fields/parties"].item
    assert item is not None
    for child in item.children:
        sent.append((child.input_name.replace(ITEM_PLACEHOLDER, "7"), f"new {child.label}"))
    # The template itself is never read (it is sent only by a page without script).
    sent.append((item.children[0].input_name, "ignored"))
    after, _ = output_from_form(EXTRACTED_SCHEMA, CONTRACT, sent, hidden=("evidence",))
    assert after["fields"]["parties"] == [
        {"name": "Beta", "role": "buyer"},
        {"name": "new Name", "role": "new Role"},
    ]


def test_every_item_removed_leaves_an_empty_list() -> None:
    root, _ = form_for(EXTRACTED_SCHEMA, CONTRACT, hidden=("evidence",))
    sent = [(n, v) for n, v in browser_submits(root) if "/parties/" not in n]
    after, _ = output_from_form(EXTRACTED_SCHEMA, CONTRACT, sent, hidden=("evidence",))
    assert after["fields"]["parties"] == []


def test_values_that_are_not_their_type_are_errors_at_their_pointer() -> None:
    root, _ = form_for(EXTRACTED_SCHEMA, CONTRACT, hidden=("evidence",))
    sent = browser_submits(
        root,
        **{
            "/fields/term_months": "twelve",
            "/fields/total_value/amount": "1e999",
            "/found_in": "{not json",
        },
    )
    after, errors = output_from_form(EXTRACTED_SCHEMA, CONTRACT, sent, hidden=("evidence",))
    assert [e["path"] for e in errors] == [
        "/fields/term_months",
        "/fields/total_value/amount",
        "/found_in",
    ]
    assert "not a whole number" in errors[0]["message"]
    assert "term_months" not in after["fields"]


def test_schema_errors_land_next_to_the_field_their_pointer_names() -> None:
    errors = [
        {"path": "/fields/total_value/amount", "message": "-5 is less than the minimum of 0"},
        {"path": "/fields/total_value", "message": "'currency' is a required property"},
        {"path": "/fields/parties/1", "message": "'role' is a required property"},
        {"path": "/nowhere/at/all", "message": "unknown"},
    ]
    root, unplaced = form_for(EXTRACTED_SCHEMA, CONTRACT, hidden=("evidence",), errors=errors)
    fields = by_pointer(root)
    assert fields["/fields/total_value/amount"].errors == ["-5 is less than the minimum of 0"]
    assert fields["/fields/total_value/currency"].errors == ["a value is required"]
    assert fields["/fields/parties/1/role"].errors == ["a value is required"]
    assert unplaced == ["/nowhere/at/all: unknown"]


def test_evidence_is_attached_by_pointer() -> None:
    record = CONTRACT["evidence"][0]
    root, _ = form_for(
        EXTRACTED_SCHEMA, CONTRACT, hidden=("evidence",), evidence={"/fields/term_months": [record]}
    )
    assert by_pointer(root)["/fields/term_months"].evidence == [record]
    assert by_pointer(root)["/fields/contract_type"].evidence == []


def test_pointers_with_slashes_and_tildes_round_trip() -> None:
    schema = {
        "type": "object",
        "properties": {"a/b": {"type": "string"}, "c~d": {"type": "integer"}},
    }
    root, _ = form_for(schema, {"a/b": "x", "c~d": 4})
    assert sorted(by_pointer(root)) == ["", "/a~1b", "/c~0d"]
    assert all(f.dom_id.isascii() and " " not in f.dom_id for f in root.walk())
    after, _ = output_from_form(schema, {}, browser_submits(root))
    assert after == {"a/b": "x", "c~d": 4}


_MONEY = st.fixed_dictionaries(
    {
        "amount": st.one_of(
            st.integers(0, 10**9), st.floats(0, 1e9, allow_nan=False).map(lambda f: round(f, 2))
        ),
        "currency": st.sampled_from(["EUR", "USD"]),
    }
)
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "parties": st.lists(
            st.fixed_dictionaries(
                {"name": st.text(min_size=1, max_size=20), "role": st.text(max_size=10)}
            ),
            max_size=4,
        ),
        "contract_type": st.text(min_size=1, max_size=30),
        "term_months": st.integers(0, 1000),
        "total_value": _MONEY,
        "liability_cap": _MONEY,
        "auto_renewal": st.booleans(),
        "governing_law": st.text(min_size=1, max_size=20),
    },
)


@settings(max_examples=60, deadline=None)
@given(_FIELDS)
def test_any_valid_fields_survive_the_form(fields: dict[str, Any]) -> None:
    # Text that is only whitespace reads as "not given", as an empty input does.
    for name in ("contract_type", "governing_law"):
        if name in fields and not fields[name].strip():
            del fields[name]
    fields.get("parties", []).sort(key=lambda p: 0)
    for party in fields.get("parties", []):
        if not party["role"].strip():
            party["role"] = "x"
        if not party["name"].strip():
            party["name"] = "n"
    jsonschema.validate(fields, FIELDS_SCHEMA)
    root, _ = form_for(FIELDS_SCHEMA, fields)
    after, errors = output_from_form(FIELDS_SCHEMA, fields, browser_submits(root))
    assert errors == []
    assert after == fields
