"""Prompt templates of pipeline files: text with ``{{ path }}`` placeholders and nothing else
(no code, no filters, no loops: a pipeline file is data).

A path starts at a variable: ``document`` (the document's text), ``outputs.<step>...`` (an
earlier step's output) and, in a map step, ``item...`` (the list item at hand) and
``index``. Strings are written as they are, other values as compact JSON, a path that leads
nowhere in this document as an empty string. Which paths a step may use is checked when the
file is loaded (:meth:`Template.check`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Template", "TemplateError", "lookup", "schema_at"]

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*\Z")


class TemplateError(ValueError):
    """A template or path is malformed, or names something the step cannot read."""


Path = tuple[str, ...]


def parse_path(text: str) -> Path:
    text = text.strip()
    if not _PATH.match(text):
        raise TemplateError(f"{text!r} is not a path like outputs.step.field")
    return tuple(text.split("."))


@dataclass(frozen=True)
class Template:
    text: str
    paths: tuple[Path, ...]

    @classmethod
    def parse(cls, text: str) -> Template:
        if "{{" in _PLACEHOLDER.sub("", text) or "}}" in _PLACEHOLDER.sub("", text):
            raise TemplateError("a '{{' or '}}' without its other half")
        return cls(text, tuple(parse_path(m.group(1)) for m in _PLACEHOLDER.finditer(text)))

    def check(self, variables: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Raise TemplateError for a path whose variable the step cannot read, or that
        leaves what its JSON Schema declares. ``variables`` maps each readable variable to
        its schema (None: anything)."""
        for path in self.paths:
            check_path(path, variables)

    def render(self, values: Mapping[str, Any]) -> str:
        return _PLACEHOLDER.sub(lambda m: _text(lookup(values, parse_path(m.group(1)))), self.text)


def check_path(path: Path, variables: Mapping[str, Mapping[str, Any] | None]) -> None:
    root, rest = path[0], path[1:]
    if root not in variables:
        raise TemplateError(
            f"{'.'.join(path)}: unknown variable {root!r} (this step can read: "
            f"{', '.join(sorted(variables))})"
        )
    if (schema := variables[root]) is not None:
        schema_at(schema, rest, where=".".join(path))


def schema_at(schema: Mapping[str, Any], path: Collection[str], *, where: str) -> Mapping[str, Any]:
    """The part of ``schema`` that ``path`` leads to; TemplateError when the schema says
    there is no such property. Where a schema does not say (no ``properties``), the path
    is taken on trust and ``{}`` (anything) returned."""
    here: Mapping[str, Any] = schema
    for part in path:
        if here.get("type") == "array" or "items" in here:
            if not part.isdigit():
                raise TemplateError(f"{where}: {part!r} indexes a list (use a number)")
            here = here.get("items") or {}
        elif "properties" in here:
            if part not in here["properties"]:
                known = ", ".join(sorted(here["properties"]))
                raise TemplateError(f"{where}: no property {part!r} (declared: {known})")
            here = here["properties"][part]
        else:
            return {}
    return here


def lookup(values: Any, path: Path) -> Any:
    """The value at ``path``; None when the document has nothing there."""
    here = values
    for part in path:
        if isinstance(here, Mapping):
            here = here.get(part)
        elif isinstance(here, list) and part.isdigit() and int(part) < len(here):
            here = here[int(part)]
        else:
            return None
    return here


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
