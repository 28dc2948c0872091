"""A pipeline's results as table columns: the CSV export's header, known before its first row.

The columns come from the output schemas of the pipeline's own steps (docpipe's
``extract_text`` is left out: its output is the document's, not a result), in step order,
each named ``<step>.<property>.<property>...``:

- a scalar (string, number, integer, boolean, null, an enum of them, a choice of them) is
  one column;
- an object with ``properties`` is flattened into its properties, in the schema's order;
- an array of scalars is one column, its items joined with ``"; "``.

What no fixed set of columns can hold is left out, and said so (:class:`Omitted`): an array
of objects or of arrays (one cell per item would make the columns depend on the data), an
object whose keys the schema leaves open, and a value of any shape. The JSON lines export
carries all of it.

Pure functions of the pipeline's definition: no database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from docpipe.pipelines.model import Pipeline
from docpipe.pipelines.text_extraction import EXTRACT_TEXT_STEP

__all__ = ["JOINER", "Column", "Columns", "Omitted", "cell_text", "result_columns"]

JOINER = "; "
_SCALARS = frozenset({"string", "number", "integer", "boolean", "null"})
# A spreadsheet runs a cell that starts with one of these as a formula; the documents and
# the models' answers are nobody's to trust, so such a text cell starts with a quote mark
# (OWASP's advice on CSV injection) and shows as the text it is.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Column:
    """One column: the value at ``path`` in ``step``'s output."""

    name: str
    step: str
    path: tuple[str, ...]
    joined: bool  # an array of scalars, in one cell

    def cell(self, outputs: Mapping[str, Any]) -> str:
        """The cell of a run whose step outputs are ``outputs``: empty when the value is
        missing or null."""
        value: Any = outputs.get(self.step)
        for key in self.path:
            if not isinstance(value, Mapping):
                return ""
            value = value.get(key)
        if self.joined and isinstance(value, list):
            return JOINER.join(cell_text(item) for item in value)
        return cell_text(value)


@dataclass(frozen=True)
class Omitted:
    """A field no column holds, and why."""

    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.name} ({self.why})"


@dataclass(frozen=True)
class Columns:
    columns: tuple[Column, ...]
    omitted: tuple[Omitted, ...]


def result_columns(pipeline: Pipeline) -> Columns:
    """The columns of ``pipeline``'s results, and the fields left out of them."""
    columns: list[Column] = []
    omitted: list[Omitted] = []
    for step in pipeline.steps:
        if step is EXTRACT_TEXT_STEP:
            continue
        for found in _flatten(step.output_schema, (step.name,)):
            if isinstance(found, Column):
                columns.append(found)
            else:
                omitted.append(found)
    return Columns(tuple(columns), tuple(omitted))


def _flatten(schema: Any, where: tuple[str, ...]) -> Iterator[Column | Omitted]:
    name = ".".join(where)
    if not isinstance(schema, Mapping):  # a boolean schema: anything (or nothing) goes
        yield Omitted(name, "a value of any shape")
    elif _is_scalar(schema):
        yield Column(name, where[0], where[1:], joined=False)
    elif _is_object(schema):
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for key, sub in properties.items():
            yield from _flatten(sub, (*where, key))
        extra = schema.get("additionalProperties")
        if (isinstance(extra, Mapping) and extra != {}) or (not properties and extra is not False):
            yield Omitted(f"{name}.*" if properties else name, "keys the schema leaves open")
    elif _kind(schema) == {"array"}:
        items = schema.get("items")
        if isinstance(items, Mapping) and _is_scalar(items):
            yield Column(name, where[0], where[1:], joined=True)
        elif isinstance(items, Mapping) and _is_object(items):
            yield Omitted(name, "an array of objects")
        elif isinstance(items, Mapping) and _kind(items) == {"array"}:
            yield Omitted(name, "an array of arrays")
        else:
            yield Omitted(name, "an array of values of any shape")
    else:
        yield Omitted(name, "a value of any shape")


def _kind(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types ``schema`` declares, null aside (a null value is an empty cell)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        declared = [declared]
    if not isinstance(declared, Sequence):
        return set()
    return {str(t) for t in declared} - {"null"}


def _is_object(schema: Mapping[str, Any]) -> bool:
    return _kind(schema) == {"object"} or ("type" not in schema and "properties" in schema)


def _is_scalar(schema: Mapping[str, Any]) -> bool:
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return all(v is None or isinstance(v, str | int | float | bool) for v in values)
    for choice in ("anyOf", "oneOf"):
        if choice in schema and "type" not in schema:
            branches = schema[choice]
            return bool(branches) and all(
                isinstance(b, Mapping) and _is_scalar(b) for b in branches
            )
    declared = schema.get("type")
    types = {declared} if isinstance(declared, str) else set(declared or ())
    return bool(types) and types <= _SCALARS


def cell_text(value: Any) -> str:
    """``value`` as a cell: empty for null, JSON for what is not a scalar, a text that a
    spreadsheet would run as a formula behind a quote mark."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, str):
        return f"'{value}" if value.startswith(_FORMULA_STARTS) else value
    # Not the shape the schema declared (an output that went to review for breaking it).
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
