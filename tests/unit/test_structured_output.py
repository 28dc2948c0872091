"""Step schemas in the form strict json_schema mode accepts, and the answers back."""

from __future__ import annotations

from typing import Any

import pytest

from docpipe.pipelines.catalog import check_answer_schemas
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.model import Pipeline, PipelineError, Step
from docpipe.pipelines.structured_output import (
    StrictSchemaError,
    drop_absent_optionals,
    strict_schema,
)


def test_optional_properties_become_required_and_nullable_and_objects_closed() -> None:
    schema = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "age": {"type": "integer", "minimum": 0},
            "kind": {"enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "note": {"type": "string"},
        },
    }
    assert strict_schema(schema) == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},  # minLength is checked by docpipe after the answer
            # A bare type gets null in its type list; anything more becomes anyOf [it, null].
            "age": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
            "kind": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
            "note": {"type": ["string", "null"]},
        },
        "required": ["name", "age", "kind", "tags", "note"],
        "additionalProperties": False,
    }
    assert schema["required"] == ["name"], "the step's own schema is left as it was"


def test_refs_anyof_and_oneof_are_kept_in_strict_form() -> None:
    schema = {
        "type": "object",
        "properties": {
            "money": {"$ref": "#/$defs/money"},
            "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "required": ["either"],
        "$defs": {"money": {"type": "object", "properties": {"amount": {"type": "number"}}}},
    }
    strict = strict_schema(schema)
    assert strict["properties"]["money"] == {"anyOf": [{"$ref": "#/$defs/money"}, {"type": "null"}]}
    assert strict["properties"]["either"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert strict["$defs"]["money"]["required"] == ["amount"]


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "array", "items": {"type": "string"}}, "root of a strict schema"),
        (
            {
                "type": "object",
                "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}},
            },
            "#/properties/m: additionalProperties",
        ),
        ({"type": "object"}, "object without properties"),
        ({"type": "object", "properties": {"x": {}}}, "#/properties/x: a value of any type"),
        ({"type": "object", "properties": {"x": {"allOf": [{"type": "string"}]}}}, "allOf"),
        ({"type": "object", "properties": {"x": {"type": "array"}}}, "what its items are"),
        ({"type": "object", "properties": {"x": {"$ref": "other.json"}}}, "only local $ref"),
    ],
)
def test_what_strict_mode_cannot_express_is_refused_with_the_place(
    schema: dict[str, Any], why: str
) -> None:
    with pytest.raises(StrictSchemaError, match=why.replace("$", r"\$")):
        strict_schema(schema)


def test_too_deep_a_schema_is_refused() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(11):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    with pytest.raises(StrictSchemaError, match="deeper than"):
        strict_schema(schema)


def test_the_nulls_of_absent_optionals_are_dropped_and_real_nulls_kept() -> None:
    schema = {
        "type": "object",
        "required": ["items"],
        "properties": {
            "note": {"type": ["string", "null"]},  # null is a real value here
            "total": {"type": "number"},
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"sku": {"type": "string"}}},
            },
        },
    }
    answer = {"note": None, "total": None, "items": [{"sku": None}, {"sku": "A1"}]}
    assert drop_absent_optionals(answer, schema) == {"note": None, "items": [{}, {"sku": "A1"}]}


def test_every_built_in_answer_schema_can_be_sent_strictly() -> None:
    check_answer_schemas(DOCUMENT_EXTRACT)
    assert all(step.answer_schemas for step in DOCUMENT_EXTRACT.steps if step.models)


def test_a_pipeline_with_a_schema_strict_mode_refuses_is_refused_naming_the_step() -> None:
    open_map = {"type": "object", "additionalProperties": {"type": "string"}}
    step = Step(
        name="tag",
        prompt_version="tag@v1",
        model="gpt-4o-mini",
        instructions="Tag.",
        output_schema=open_map,
        execute=lambda ctx: {},
        answer_schemas=(open_map,),
    )
    with pytest.raises(PipelineError, match=r"step 'tag' of tags:v1: .*additionalProperties"):
        check_answer_schemas(Pipeline(name="tags", version=1, steps=(step,)))
