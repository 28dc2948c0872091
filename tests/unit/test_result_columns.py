"""A pipeline's results as spreadsheet columns: titles a person reads, every shape in a
readable cell, each value's evidence, and how values become CSV cells."""

from __future__ import annotations

from dataclasses import replace
from textwrap import dedent
from typing import Any

from docpipe.pipelines.columns import (
    cell_text,
    evidence_by_path,
    evidence_cells,
    readable_value,
    result_columns,
)
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.files import load_pipeline_file
from docpipe.pipelines.model import Pipeline, Step, StepInput
from docpipe.pipelines.text_extraction import with_text_extraction


def pipeline_of(schema: dict[str, Any]) -> Pipeline:
    def run(ctx: StepInput) -> dict[str, Any]:
        return {}

    step = Step(name="read", prompt_version="read@v1", output_schema=schema, execute=run)
    return with_text_extraction(Pipeline(name="p", version=1, steps=(step,), source="test"))


def test_document_extract_has_a_titled_column_for_every_field_parties_included() -> None:
    columns = result_columns(DOCUMENT_EXTRACT, taken=["Document", "Status"])
    by_name = {c.name: c.title for c in columns.columns}
    assert list(by_name.items())[:7] == [
        ("extract_sections.sections", "Sections"),
        ("extract_fields.fields.parties", "Parties"),
        ("extract_fields.fields.contract_type", "Contract type"),
        ("extract_fields.fields.effective_date", "Effective date"),
        ("extract_fields.fields.term_months", "Term months"),
        ("extract_fields.fields.total_value.amount", "Total value: amount"),
        ("extract_fields.fields.total_value.currency", "Total value: currency"),
    ]
    assert by_name["extract_fields.fields.liability_cap.amount"] == "Liability cap: amount"
    assert list(by_name)[-3:] == [
        "summarize.summary",
        "summarize.key_points",
        "summarize.risk_flags",
    ]
    assert not any(n.startswith("extract_text.") for n in by_name), "the document's, not a result"
    assert "extract_fields.evidence" not in by_name, "the evidence has columns of its own"
    assert [str(o) for o in columns.omitted] == [
        "extract_fields.evidence (the values' evidence: ask for evidence=true, docpipe batch "
        "results --evidence)"
    ]
    assert result_columns(DOCUMENT_EXTRACT, evidence=True).omitted == ()
    # An object's properties share its evidence; other values have their own.
    groups = {c.name: c.evidence for c in columns.columns}
    total = groups["extract_fields.fields.total_value.amount"]
    assert total is not None and total.title == "Total value" and not total.last
    assert total.path == ("fields", "total_value")
    assert groups["extract_fields.fields.total_value.currency"] == replace(total, last=True)
    parties = groups["extract_fields.fields.parties"]
    assert parties is not None and (parties.title, parties.last) == ("Parties", True)
    assert groups["summarize.summary"] is None, "summarize records no evidence"


def test_every_shape_is_a_column_titled_apart_from_the_others() -> None:
    scalar_choice = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": ["string", "null"]},
            "kind": {"enum": ["a", "b", None], "title": "Kind of thing"},
            "maybe": scalar_choice,
            "owner": {"type": ["object", "null"], "properties": {"name": {"type": "string"}}},
            "tags": {"type": "array", "items": {"type": "string"}},
            "people": {"type": "array", "items": {"type": "object"}},
            "grid": {"type": "array", "items": {"type": "array"}},
            "anything": {},
            "extra": {"type": "object", "additionalProperties": {"type": "string"}},
            "status": {"type": "string"},
        },
    }
    columns = result_columns(pipeline_of(schema), taken=["Status"])
    assert [(c.name, c.title) for c in columns.columns] == [
        ("read.name", "Read: name"),  # two names: each with what it is the name of
        ("read.kind", "Kind of thing"),  # the schema's title
        ("read.maybe", "Maybe"),
        ("read.owner.name", "Owner: name"),
        ("read.tags", "Tags"),
        ("read.people", "People"),
        ("read.grid", "Grid"),
        ("read.anything", "Anything"),
        ("read.extra", "Extra"),
        ("read.status", "Read: status"),  # "Status" is the run's
    ]
    assert columns.omitted == ()
    outputs = {
        "read": {
            "name": "Ann",
            "owner": None,
            "tags": ["a", "=b"],
            "people": [{"name": "Acme Ltd", "role": "supplier"}, {"name": "Borealis SAS"}, {}],
            "grid": [[1, 2], [3]],
            "anything": {"deep": {"x": [1]}},
            "extra": {"lead": "Bo", "count": 2, "none": None},
        }
    }
    cells = {c.name: c.cell(outputs) for c in columns.columns}
    assert cells == {
        "read.name": "Ann",
        "read.kind": "",
        "read.maybe": "",
        "read.owner.name": "",
        "read.tags": "a; =b",
        "read.people": "Acme Ltd (supplier); Borealis SAS; ",
        "read.grid": "[1,2]; [3]",
        "read.anything": 'deep: {"x":[1]}',
        "read.extra": "lead: Bo; count: 2",
        "read.status": "",
    }
    assert readable_value([True, None, 1.5]) == "true; ; 1.5"


def test_a_values_evidence_says_its_quote_page_and_who_corrected_it() -> None:
    columns = {c.name: c for c in result_columns(DOCUMENT_EXTRACT, evidence=True).columns}
    record = {
        "field": "parties",
        "value": [{"name": "Acme Ltd", "role": "supplier"}],
        "start": 10,
        "end": 30,
        "section": "1",
        "supported": True,
        "support": "supported",
    }
    outputs = {
        "extract_fields": {
            "evidence": [
                record | {"path": "/fields/parties", "quote": "Acme Ltd, the supplier", "page": 2},
                record
                | {
                    "field": "total_value",
                    "path": "/fields/total_value",
                    "value": {"amount": 9, "currency": "EUR"},
                    "quote": "",
                    "model_quote": "EUR 7",
                    "start": None,
                    "end": None,
                    "page": None,
                    "supported": False,
                    "support": "corrected",
                    "corrected": True,
                    "corrected_by": "ana",
                },
                record
                | {
                    "field": "term_months",
                    "path": "/fields/term_months",
                    "value": 7,
                    "quote": "7.",
                    "page": 1,
                    "supported": False,
                    "support": "value_not_in_quote",
                },
            ]
        }
    }
    records = evidence_by_path(outputs)
    cells = {name: evidence_cells(c, records) for name, c in columns.items() if c.evidence}
    assert cells["extract_fields.fields.parties"] == ("Acme Ltd, the supplier", 2, "supported")
    assert cells["extract_fields.fields.total_value.currency"] == (None, None, "corrected by ana")
    assert cells["extract_fields.fields.term_months"] == (
        "7.",
        1,
        "quote found, value not in it",
    )
    assert cells["extract_fields.fields.governing_law"] == (None, None, None), "no record"


# A step quoting the values of its mapping ``fields`` beside a note it does not quote, then
# a step quoting values of each item of a list.
QUOTING = dedent(
    """\
    name: quoting
    version: 1
    defaults: {model: gpt-4o-mini}
    steps:
      - name: terms
        kind: ask
        evidence: fields
        prompt: "{{ document }}"
        output_schema:
          type: object
          required: [fields, note, parties]
          properties:
            fields:
              type: object
              properties:
                term:
                  type: object
                  properties: {value: {type: integer}, quote: {type: string}}
                law:
                  type: object
                  properties: {value: {type: string}, quote: {type: string}}
            note: {type: string}
            parties: {type: array, maxItems: 4, items: {type: string}}
      - name: roles
        kind: map
        over: outputs.terms.parties
        evidence: fields
        prompt: "{{ item }}"
        output_schema:
          type: object
          required: [fields]
          properties:
            fields:
              type: object
              additionalProperties:
                type: object
                properties: {value: {type: string}, quote: {type: string}}
    """
)


def test_only_values_a_step_quotes_get_evidence_columns() -> None:
    builtin = {c.name: c for c in result_columns(DOCUMENT_EXTRACT, evidence=True).columns}
    assert builtin["extract_fields.fields.governing_law"].evidence is not None
    assert builtin["extract_fields.found_in"].evidence is None, "bookkeeping, never quoted"
    columns = result_columns(load_pipeline_file(QUOTING, "quoting.yaml"), evidence=True)
    groups = {c.name: c.evidence for c in columns.columns}
    term = groups["terms.fields.term.value"]
    assert term is not None and (term.title, term.path) == ("Term", ("fields", "term"))
    assert groups["terms.fields.term.quote"] == replace(term, last=True)
    assert groups["terms.fields.law.quote"] is not None
    assert groups["terms.note"] is None and groups["terms.parties"] is None
    # Each item's values have a quote of their own: no column holds them, and the export
    # says where they are instead of adding columns that would stay empty.
    assert groups["roles.items"] is None
    assert [str(o) for o in columns.omitted] == [
        "roles.evidence (the evidence of values inside a list, a quote per item: in the JSON "
        "lines and in format=xlsx's evidence sheet)"
    ]
    # A Python step that does not say where its records point may have one for any value.
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "evidence": {"type": "array"}},
    }
    [a] = result_columns(pipeline_of(schema), evidence=True).columns
    assert a.evidence is not None


def test_cells_are_plain_text_and_never_a_spreadsheet_formula() -> None:
    assert [cell_text(v) for v in (None, True, False, 12, 1.25, float("nan"), "x")] == [
        "",
        "true",
        "false",
        "12",
        "1.25",
        "",
        "x",
    ]
    for formula in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx"):
        assert cell_text(formula) == "'" + formula
    assert cell_text(-1) == "-1", "a number is a number"
    assert cell_text({"a": [1, "é"]}) == '{"a":[1,"é"]}', "an output outside its schema"
