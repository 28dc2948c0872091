"""The pipelines this process knows, by key: the built-in ones, registered explicitly."""

from __future__ import annotations

from docpipe.errors import InvalidRequestError
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.model import Pipeline

__all__ = ["get_pipeline", "pipelines", "register"]

_REGISTRY: dict[str, Pipeline] = {}


def register(pipeline: Pipeline) -> Pipeline:
    if pipeline.key in _REGISTRY:
        raise ValueError(f"pipeline {pipeline.key} is registered twice")
    _REGISTRY[pipeline.key] = pipeline
    return pipeline


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
