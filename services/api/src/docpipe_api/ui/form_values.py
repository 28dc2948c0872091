"""The output a submitted review form describes (the reverse of docpipe_api.ui.forms).

Pure functions of their arguments. Values are read as their schema's type; array items
that arrive with gaps in their indices (removed in the browser) are renumbered in order; a
container with a ``shape:`` marker exists even when every field in it is empty.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from docpipe_api.ui.forms import (
    ITEM_PLACEHOLDER,
    MAX_DEPTH,
    SHAPE,
    VALUE,
    escape_token,
    kind_of,
    nullable,
    resolve,
    unescape_token,
)

__all__ = ["output_from_form"]


def output_from_form(
    schema: Mapping[str, Any],
    before: Mapping[str, Any] | None,
    fields: Iterable[tuple[str, str]],
    *,
    hidden: Sequence[str] = (),
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The whole output the form describes: ``before`` with every property the form shows
    replaced by what was submitted (``hidden`` ones kept as they were); and the values
    that cannot be read as their type ({"path", "message"}), which are left out."""
    values: dict[str, str] = {}
    shapes: dict[str, str] = {}
    for name, text in fields:
        if name.startswith(VALUE) and ITEM_PLACEHOLDER not in name:
            values[name[len(VALUE) :]] = text
        elif name.startswith(SHAPE) and ITEM_PLACEHOLDER not in name:
            shapes[name[len(SHAPE) :]] = text
    reader = _Reader(schema, values, shapes)
    read = reader.read(schema, "", True, 0)
    after: dict[str, Any] = read if isinstance(read, dict) else {}
    for name in hidden:
        if isinstance(before, Mapping) and name in before:
            after[name] = copy.deepcopy(before[name])
    return after, reader.errors


_ABSENT = object()


class _Reader:
    def __init__(self, root: Mapping[str, Any], values: dict[str, str], shapes: dict[str, str]):
        self.root = root
        self.values = values
        self.shapes = shapes
        self.errors: list[dict[str, str]] = []

    def read(self, schema: Mapping[str, Any], pointer: str, required: bool, depth: int) -> Any:
        schema = resolve(self.root, schema)
        kind = kind_of(schema) if depth < MAX_DEPTH else "json"
        if kind == "object" and self.shapes.get(pointer, "object") == "object":
            return self._object(schema, pointer, required, depth)
        if kind == "array" and self.shapes.get(pointer, "array") == "array":
            return self._array(schema, pointer, depth)
        if pointer not in self.values:
            return _ABSENT
        return self._scalar(kind, schema, pointer, self.values[pointer], required)

    def _below(self, pointer: str) -> set[str]:
        """The first tokens of the submitted names below ``pointer``."""
        prefix = pointer + "/"
        return {
            key[len(prefix) :].split("/", 1)[0]
            for key in (*self.values, *self.shapes)
            if key.startswith(prefix)
        }

    def _object(self, schema: Mapping[str, Any], pointer: str, required: bool, depth: int) -> Any:
        properties: Mapping[str, Any] = schema.get("properties", {})
        wanted = set(schema.get("required", ()))
        extra = sorted(
            name for name in map(unescape_token, self._below(pointer)) if name not in properties
        )
        result: dict[str, Any] = {}
        for name in [*properties, *extra]:
            read = self.read(
                properties.get(name, {}),
                f"{pointer}/{escape_token(name)}",
                name in wanted,
                depth + 1,
            )
            if read is not _ABSENT:
                result[name] = read
        if result or required or pointer in self.shapes:
            return result
        return _ABSENT

    def _array(self, schema: Mapping[str, Any], pointer: str, depth: int) -> Any:
        items: Mapping[str, Any] = schema.get("items", {})
        indices = sorted(int(t) for t in self._below(pointer) if t.isdigit())
        result = []
        for index in indices:
            read = self.read(items, f"{pointer}/{index}", True, depth + 1)
            if read is not _ABSENT:
                result.append(read)
        if result or pointer in self.shapes:
            return result
        return _ABSENT

    def _scalar(
        self, kind: str, schema: Mapping[str, Any], pointer: str, text: str, required: bool
    ) -> Any:
        if text.strip() == "":
            return None if required and nullable(schema) else _ABSENT
        try:
            return _parse(kind, text)
        except ValueError as exc:
            self.errors.append({"path": pointer, "message": str(exc)})
            return _ABSENT


def _parse(kind: str, text: str) -> Any:
    if kind in ("text", "date"):
        return text
    if kind == "integer":
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"{text.strip()[:40]!r} is not a whole number") from None
    if kind == "number":
        try:
            number = float(text.strip())
        except ValueError:
            raise ValueError(f"{text.strip()[:40]!r} is not a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(f"{text.strip()[:40]!r} is not a number")
        return int(number) if number.is_integer() and re.fullmatch(r"\s*-?\d+\s*", text) else number
    if kind == "boolean":
        if text in ("true", "false"):
            return text == "true"
        raise ValueError("choose yes or no")
    try:  # enum (options are JSON) and json
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
