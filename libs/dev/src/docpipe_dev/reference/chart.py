"""The chart's values reference, from ``charts/docpipe/values.schema.json`` (every property
with its type and description) and ``values.yaml`` (its default)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from docpipe_dev.reference.markdown import REPO, cell, code, table

__all__ = ["Value", "page", "schema", "undocumented", "values"]

CHART = REPO / "charts/docpipe"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


@dataclass(frozen=True)
class Value:
    path: str  # dotted; "*" for a key of the user's choosing
    description: str | None
    kind: str
    target: dict[str, Any]


def values(node: dict[str, Any] | None = None, path: str = "") -> Iterator[Value]:
    """Every property of the schema, parents first, following its local $refs (a bare $ref
    is described by its definition)."""
    definitions = schema().get("definitions", {})
    for name, prop in (node or schema()).get("properties", {}).items():
        target = prop
        for ref in [prop.get("$ref")] + [p.get("$ref") for p in prop.get("allOf", [])]:
            if ref:
                target = definitions[ref.rsplit("/", 1)[1]]
        description = prop.get("description") or target.get("description")
        yield Value(f"{path}{name}", description, _kind(target), target)
        yield from values(target, f"{path}{name}.")
        if isinstance(target.get("additionalProperties"), dict):
            yield from values(target["additionalProperties"], f"{path}{name}.*.")


def undocumented() -> list[str]:
    return [
        f'chart value {v.path} has no description: add "description" to it in '
        "charts/docpipe/values.schema.json"
        for v in values()
        if not (v.description or "").strip()
    ]


def page() -> str:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    sections: dict[str, list[list[str]]] = {}
    for value in values():
        top = value.path.split(".", 1)[0]
        sections.setdefault(top, []).append(
            [code(value.path), value.kind, _default(defaults, value), cell(value.description or "")]
        )
    parts = []
    for top, rows in sections.items():
        parts.append(f"## {top}\n\n" + table(["value", "type", "default", "what it sets"], rows))
    return "\n".join(parts)


def _kind(target: dict[str, Any]) -> str:
    if "enum" in target:
        return "one of " + ", ".join(code(v) for v in target["enum"])
    kind = target.get("type", "")
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind)


def _default(defaults: Any, value: Value) -> str:
    node = defaults
    for key in value.path.split("."):
        if not isinstance(node, dict) or key not in node:
            return ""
        node = node[key]
    if isinstance(node, dict):
        return "" if node else code("{}")
    return code(json.dumps(node))
