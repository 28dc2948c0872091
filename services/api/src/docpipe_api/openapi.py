"""The OpenAPI document with the deployment's own bounds: the request models state the
widest values any deployment accepts, the served document the ones this one's settings
accept (a client or fuzzer reading it is not told that 30 days is fine where 7 is the limit).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from docpipe.settings import Settings

__all__ = ["serve_with_live_bounds"]

# Request body property -> the setting that bounds it, and how the bound is written.
_NUMBER_MAXIMA: dict[str, Callable[[Settings], float]] = {
    "deadline_s": lambda s: s.max_deadline_s,
    "run_budget_usd": lambda s: float(s.max_run_budget_usd),
}
_EXTRACT_NUMBER_MAXIMA: dict[str, Callable[[Settings], float]] = {
    "budget_usd": lambda s: float(s.max_run_budget_usd),  # a run's; a batch's is its total
}


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
            if "documents" in properties:
                properties["documents"]["maxItems"] = settings.max_batch_documents
