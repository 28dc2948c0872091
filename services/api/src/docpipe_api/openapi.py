"""This deployment's OpenAPI document: the pipelines it runs are named as an enum.

The routes' models describe what any docpipe accepts; which pipeline keys exist is known
only once the catalog is loaded (the lifespan), and a request naming another one is refused
(422). Saying so in the document keeps it exact: every request it allows is accepted.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from docpipe.pipelines.catalog import Catalog

__all__ = ["describe_pipelines"]

# The request bodies that name a pipeline.
_BODIES = (("/documents/{document_id}/extract", "post"), ("/batches", "post"))


def describe_pipelines(app: FastAPI, pipelines: Catalog) -> None:
    """Make ``app``'s OpenAPI document list ``pipelines``' keys where a body names one."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        document = build()  # also cached by FastAPI: the enum goes into the cached copy
        for path, method in _BODIES:
            body = document["paths"][path][method]["requestBody"]["content"]["application/json"]
            body["schema"]["properties"]["pipeline"]["enum"] = sorted(pipelines.by_key)
        return document

    app.openapi = openapi  # type: ignore[method-assign]
