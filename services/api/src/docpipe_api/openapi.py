"""This deployment's OpenAPI document: its own bounds, and the pipelines it runs.

The routes' models describe what any docpipe accepts. The served document says what this
one accepts, so that a client or a fuzzer reading it is never told that a request is fine
which the API refuses: the bounds of its settings (30 days is not fine where 7 is the
limit), and the pipeline keys of its catalog as an enum (known only once the catalog is
loaded, in the lifespan; another key is refused with 422).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from fastapi import FastAPI

from docpipe.pipelines.catalog import Catalog
from docpipe.settings import Settings
from docpipe_api.schemas import USD_CENTS_STRING

__all__ = ["describe_pipelines", "serve_with_live_bounds", "usd_string_at_most"]

# Request body property -> the setting that bounds it, and how the bound is written.
_NUMBER_MAXIMA: dict[str, Callable[[Settings], float]] = {
    "deadline_s": lambda s: s.max_deadline_s,
    "run_budget_usd": lambda s: float(s.max_run_budget_usd),
}
_EXTRACT_NUMBER_MAXIMA: dict[str, Callable[[Settings], float]] = {
    "budget_usd": lambda s: float(s.max_run_budget_usd),  # a run's; a batch's is its total
}
# The request bodies that name a pipeline.
_PIPELINE_BODIES = (
    ("/documents/{document_id}/extract", "post"),
    ("/batches", "post"),
    ("/evaluations", "post"),
)
# The request body that names a pipeline by name, and one of its steps.
_STEP_BODY = ("/evaluation-sets", "post")
# The requests that name a step of a run.
_RETRY_PATH = "/runs/{run_id}/retry"
_DECISION_PATH = "/runs/{run_id}/review"


def serve_with_live_bounds(app: FastAPI, settings: Callable[[], Settings]) -> None:
    """Make ``app.openapi()`` state the bounds of ``settings()`` (read on first use)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = copy.deepcopy(build())  # its request schemas are shared module data
            _apply(document, settings())
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def describe_pipelines(app: FastAPI, pipelines: Catalog, known_models: Iterable[str]) -> None:
    """Make ``app``'s OpenAPI document list ``pipelines``' keys where a body names one, the
    steps and models an evaluation may name, and their steps' names where a request names
    a run's step (a retry's ``from_step``: one of the run's steps, which only the run
    knows, but always one of these)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        document = build()  # cached by the app: the enums go into the cached copy
        for path, method in _PIPELINE_BODIES:
            body = document["paths"][path][method]["requestBody"]["content"]["application/json"]
            body["schema"]["properties"]["pipeline"]["enum"] = sorted(pipelines.by_key)
        steps = pipelines.step_names
        for parameter in document["paths"][_RETRY_PATH]["post"]["parameters"]:
            if parameter["name"] == "from_step":
                _enumerate(parameter["schema"], steps)
        decision = document["paths"][_DECISION_PATH]["post"]["requestBody"]["content"]
        _enumerate(decision["application/json"]["schema"]["properties"]["from_step"], steps)
        models = document["paths"]["/evaluations"]["post"]["requestBody"]["content"]
        evaluation = models["application/json"]["schema"]
        asking = {s.name for p in pipelines for s in p.steps if s.model is not None}
        evaluation["properties"]["models"] |= {
            "propertyNames": {"enum": ["*", *sorted(asking)]},
            "additionalProperties": {"enum": sorted(known_models)},
        }
        # A model is named for a step of the pipeline evaluated, not of any pipeline.
        evaluation["anyOf"] = [
            {
                "properties": {
                    "pipeline": {"const": p.key},
                    "models": {
                        "propertyNames": {
                            "enum": ["*", *sorted(s.name for s in p.steps if s.model)]
                        }
                    },
                }
            }
            for p in pipelines
        ]
        path, method = _STEP_BODY
        body = document["paths"][path][method]["requestBody"]["content"]["application/json"]
        latest = {p.name: pipelines.latest(p.name) for p in pipelines}
        body["schema"]["anyOf"] = [
            {"properties": {"pipeline": {"const": name}, "step": {"enum": p.step_names}}}
            for name, p in sorted(latest.items())
        ]
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _enumerate(schema: dict[str, Any], values: list[str]) -> None:
    """The string variant of ``schema`` (itself, or one of its ``anyOf``) takes ``values``."""
    for variant in schema.get("anyOf", [schema]):
        if variant.get("type") == "string":
            variant["enum"] = values


def _apply(document: dict[str, Any], settings: Settings) -> None:
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            properties = (body or {}).get("schema", {}).get("properties")
            if not properties:
                continue
            maxima = dict(_NUMBER_MAXIMA)
            if path.endswith("/extract"):
                maxima |= _EXTRACT_NUMBER_MAXIMA
            for name, bound in maxima.items():
                for variant in properties.get(name, {}).get("anyOf", []):
                    if variant.get("type") == "number":
                        variant["maximum"] = bound(settings)
                    elif variant.get("type") == "string" and name.endswith("_usd"):
                        # Amounts may be sent as decimal strings too (the CLI does).
                        limit = Decimal(str(bound(settings)))
                        variant["pattern"] = usd_string_at_most(limit)
            if "documents" in properties:
                properties["documents"]["maxItems"] = settings.max_batch_documents


def usd_string_at_most(limit: Decimal) -> str:
    """The pattern of the decimal strings schemas.USD_STRING accepts whose value is at most
    ``limit`` (at least 1, at most 6 places): a regular expression cannot compare numbers,
    so it spells out the smaller integer parts and, at the limit's own, the smaller
    fractions (tests/unit/test_openapi_amounts.py checks it against Decimal)."""
    whole, _, places = format(limit.quantize(Decimal("0.000001")), "f").partition(".")
    smaller = _smaller_digits(whole)
    if len(whole) > 1:  # every shorter integer part
        smaller.insert(0, "[1-9]" + (f"[0-9]{{0,{len(whole) - 2}}}" if len(whole) > 2 else ""))
    alternatives = [whole + r"(?:\." + _fraction_at_most(places) + ")?", USD_CENTS_STRING]
    if smaller:
        alternatives.insert(0, "(?:" + "|".join(smaller) + r")(?:\.[0-9]{1,6})?")
    return "^(?:" + "|".join(alternatives) + ")$"


def _smaller_digits(digits: str) -> list[str]:
    """Alternatives for the integers of as many digits as ``digits`` (no leading zero) that
    are smaller: equal up to one position, a smaller digit there, anything after."""
    out = []
    for i, digit in enumerate(digits):
        low, high = (1 if i == 0 else 0), int(digit) - 1
        if high < low:
            continue
        rest = len(digits) - i - 1
        out.append(
            digits[:i]
            + (str(low) if low == high else f"[{low}-{high}]")
            + (f"[0-9]{{{rest}}}" if rest else "")
        )
    return out


def _fraction_at_most(places: str) -> str:
    """1-6 fraction digits worth at most ``.places`` (6 digits): a prefix of it (the rest
    zeros), or equal up to one position, a smaller digit there, anything after."""
    alternatives = [places[:i] for i in range(1, 7)]
    for i, digit in enumerate(places):
        if digit != "0":
            rest = 5 - i
            smaller = "0" if digit == "1" else f"[0-{int(digit) - 1}]"
            alternatives.append(places[:i] + smaller + (f"[0-9]{{0,{rest}}}" if rest else ""))
    return "(?:" + "|".join(dict.fromkeys(alternatives)) + ")"
