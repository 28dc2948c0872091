"""The pipelines this process knows, by key: the built-in ones, registered explicitly."""

from __future__ import annotations

from docpipe.errors import InvalidRequestError
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.model import Pipeline
from docpipe.structured_output import StrictSchemaError, strict_schema

__all__ = ["check_answer_schemas", "get_pipeline", "pipelines", "register"]

_REGISTRY: dict[str, Pipeline] = {}


def register(pipeline: Pipeline) -> Pipeline:
    if pipeline.key in _REGISTRY:
        raise ValueError(f"pipeline {pipeline.key} is registered twice")
    check_answer_schemas(pipeline)
    _REGISTRY[pipeline.key] = pipeline
    return pipeline


def check_answer_schemas(pipeline: Pipeline) -> None:
    """Refuse a pipeline a step of which asks for an answer schema that strict json_schema
    mode cannot take (a ValueError naming the pipeline, the step and the place)."""
    for step in pipeline.steps:
        for schema in step.answer_schemas:
            try:
                strict_schema(schema)
            except StrictSchemaError as exc:
                raise ValueError(
                    f"pipeline {pipeline.key}, step {step.name}: its answer schema cannot be "
                    f"sent in json_schema (strict) mode: {exc}"
                ) from None


def pipelines() -> dict[str, Pipeline]:
    """Every registered pipeline by key."""
    return dict(_REGISTRY)


def get_pipeline(key: str) -> Pipeline:
    known = pipelines()
    try:
        return known[key]
    except KeyError:
        raise InvalidRequestError(
            f"unknown pipeline {key!r} (known: {', '.join(sorted(known))})"
        ) from None


register(DOCUMENT_EXTRACT)
