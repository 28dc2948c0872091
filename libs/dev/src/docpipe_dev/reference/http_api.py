"""The HTTP API reference: the app's own OpenAPI document, rendered (every route with its
parameters, body and answers, then every schema), as a deployment with the default
settings serves it: its bounds and its pipelines."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from docpipe.pipelines.catalog import load_catalog
from docpipe.settings import Settings
from docpipe_dev.reference.markdown import cell, code, table

__all__ = ["openapi_document", "page"]

_METHODS = ("get", "put", "post", "delete", "patch")


@lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    """What GET /openapi.json answers on a deployment with the default settings."""
    from docpipe_api.main import create_app
    from docpipe_api.openapi import describe_pipelines

    with _default_environment():
        settings = Settings()
        app = create_app(settings)
        # done in the lifespan when serving
        describe_pipelines(app, load_catalog(settings), settings.provider_table.models)
        document: dict[str, Any] = app.openapi()
    return document


@contextmanager
def _default_environment() -> Iterator[None]:
    """No DOCPIPE_* variable of the machine building the site: the page shows docpipe's
    defaults, not someone's deployment."""
    saved = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith("DOCPIPE_")}
    try:
        yield
    finally:
        os.environ.update(saved)


def page() -> str:
    doc = openapi_document()
    schemas: dict[str, Any] = doc.get("components", {}).get("schemas", {})
    by_tag: dict[str, list[str]] = {}
    for path, item in doc["paths"].items():
        for method in _METHODS:
            if method in item:
                tag = (item[method].get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append(_operation(method, path, item[method]))
    parts = [
        f"Version {doc['info']['version']}; the document itself is [openapi.json](openapi.json).\n"
    ]
    for tag, operations in by_tag.items():
        parts.append(f"## {tag.replace('-', ' ').capitalize()}\n")
        parts += operations
    parts.append("## Schemas\n")
    for name, schema in schemas.items():
        parts.append(f"### {name}\n\n{cell(schema.get('description', ''))}\n")
        if schema.get("properties"):
            parts.append(_fields(schema))
        elif "enum" in schema:
            parts.append("One of " + ", ".join(code(v) for v in schema["enum"]) + ".\n")
    return "\n".join(parts)


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    parts = [f"### `{method.upper()} {path}`\n", f"**{cell(op.get('summary', ''))}**"]
    if op.get("description"):
        parts.append(op["description"].strip())
    if op.get("parameters"):
        rows = [
            [
                code(p["name"]),
                p["in"],
                "yes" if p.get("required") else "",
                _type(p.get("schema", {})),
                cell(p.get("description", "")),
            ]
            for p in op["parameters"]
        ]
        parts.append("Parameters:\n\n" + table(["name", "in", "required", "type", "meaning"], rows))
    if body := op.get("requestBody"):
        parts.append(_body(body))
    rows = []
    for status, answer in sorted(op.get("responses", {}).items()):
        content: dict[str, Any] = answer.get("content", {})
        first: dict[str, Any] = next(iter(content.values()), {})
        schema = first.get("schema")
        rows.append(
            [code(status), cell(answer.get("description", "")), _type(schema) if schema else ""]
        )
    parts.append("Answers:\n\n" + table(["status", "when", "body"], rows))
    return "\n\n".join(parts) + "\n"


def _body(body: dict[str, Any]) -> str:
    content: dict[str, Any] = body.get("content", {})
    required = "required" if body.get("required") else "optional"
    kinds = ", ".join(code(kind) for kind in content)
    text = f"Body ({required}): {kinds}."
    schema = content.get("application/json", {}).get("schema", {})
    if schema.get("properties"):
        text += "\n\n" + _fields(schema)
    elif schema:
        text += f" {_type(schema)}."
    return text


def _fields(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", ()))
    rows = [
        [
            code(name),
            _type(prop),
            "yes" if name in required else "",
            cell(prop.get("description", "")),
        ]
        for name, prop in schema["properties"].items()
    ]
    return table(["field", "type", "required", "meaning"], rows)


def _type(schema: dict[str, Any]) -> str:
    """A JSON Schema in a few words: a link to a named schema, "list of X", "X or null"."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            kinds = [_type(s) for s in schema[key] if s.get("type") != "null"]
            nullable = any(s.get("type") == "null" for s in schema[key])
            return " or ".join(dict.fromkeys(kinds)) + (" or null" if nullable else "")
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _type(schema["allOf"][0])
    if "enum" in schema:
        return "one of " + ", ".join(code(v) for v in schema["enum"])
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if fmt := schema.get("format"):
        return f"{kind} ({fmt})"
    return str(kind)
