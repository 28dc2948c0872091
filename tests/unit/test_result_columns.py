"""A pipeline's results as CSV columns: which shapes flatten, which are left out (and why),
and how values become cells."""

from __future__ import annotations

from typing import Any

from docpipe.pipelines.columns import Omitted, cell_text, result_columns
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.model import Pipeline, Step, StepInput
from docpipe.pipelines.text_extraction import with_text_extraction


def pipeline_of(schema: dict[str, Any]) -> Pipeline:
    def run(ctx: StepInput) -> dict[str, Any]:
        return {}

    step = Step(name="read", prompt_version="read@v1", output_schema=schema, execute=run)
    return with_text_extraction(Pipeline(name="p", version=1, steps=(step,), source="test"))


def test_document_extract_flattens_its_fields_and_names_what_it_leaves_out() -> None:
    columns = result_columns(DOCUMENT_EXTRACT)
    names = [c.name for c in columns.columns]
    assert names[:4] == [
        "extract_fields.fields.contract_type",
        "extract_fields.fields.effective_date",
        "extract_fields.fields.term_months",
        "extract_fields.fields.total_value.amount",
    ]
    assert names[-3:] == ["summarize.summary", "summarize.key_points", "summarize.risk_flags"]
    assert not any(n.startswith("extract_text.") for n in names), "the document's, not a result"
    assert columns.omitted == (
        Omitted("extract_sections.sections", "an array of objects"),
        Omitted("extract_fields.fields.parties", "an array of objects"),
        Omitted("extract_fields.found_in", "keys the schema leaves open"),
        Omitted("extract_fields.evidence", "an array of objects"),
    )


def test_each_shape_is_a_column_or_left_out_with_its_reason() -> None:
    scalar_choice = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": ["string", "null"]},
            "kind": {"enum": ["a", "b", None]},
            "maybe": scalar_choice,
            "owner": {"type": ["object", "null"], "properties": {"age": {"type": "integer"}}},
            "tags": {"type": "array", "items": {"type": "string"}},
            "grid": {"type": "array", "items": {"type": "array"}},
            "any_list": {"type": "array"},
            "anything": {},
            "either": {"anyOf": [{"type": "string"}, {"type": "object"}]},
            "extra": {"type": "object", "properties": {"x": {"type": "number"}},
                      "additionalProperties": {"type": "string"}},
        },
    }  # fmt: skip
    columns = result_columns(pipeline_of(schema))
    assert [(c.name, c.joined) for c in columns.columns] == [
        ("read.name", False),
        ("read.kind", False),
        ("read.maybe", False),
        ("read.owner.age", False),
        ("read.tags", True),
        ("read.extra.x", False),
    ]
    assert [str(o) for o in columns.omitted] == [
        "read.grid (an array of arrays)",
        "read.any_list (an array of values of any shape)",
        "read.anything (a value of any shape)",
        "read.either (a value of any shape)",
        "read.extra.* (keys the schema leaves open)",
    ]
    outputs = {"read": {"name": "Ann", "owner": None, "tags": ["a", "=b"], "extra": {"x": 0.5}}}
    cells = {c.name: c.cell(outputs) for c in columns.columns}
    assert cells == {
        "read.name": "Ann",
        "read.kind": "",
        "read.maybe": "",
        "read.owner.age": "",
        "read.tags": "a; '=b",
        "read.extra.x": "0.5",
    }


def test_cells_are_plain_text_and_never_a_spreadsheet_formula() -> None:
    assert [cell_text(v) for v in (None, True, False, 12, 1.25, float("nan"), "x")] == [
        "", "true", "false", "12", "1.25", "", "x",
    ]  # fmt: skip
    for formula in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx"):
        assert cell_text(formula) == "'" + formula
    assert cell_text(-1) == "-1", "a number is a number"
    assert cell_text({"a": [1, "é"]}) == '{"a":[1,"é"]}', "an output outside its schema"
