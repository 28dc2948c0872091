"""A form generated from a step's output schema (docpipe_api.ui.form_values reads it back).

Pure functions of their arguments. :func:`form_for` turns a JSON Schema and a value into a
tree of :class:`Field` (nested objects, arrays whose items can be added and removed, enums
as selects, numbers, booleans, dates, and a JSON text box for what a form cannot show
field by field), each named by the JSON Pointer of its value, so that schema errors, which
carry pointers, land next to the field they are about. :func:`output_from_form` reads the
submitted fields back into the whole output (docpipe_api.ui.form_values): the properties
the form does not show (the evidence list) stay as they were.

Input names: ``value:<pointer>`` for a value, ``shape:<pointer>`` (``object`` or
``array``) for a container that exists even when every field in it is empty. Array items
may arrive with gaps in their indices (an item removed in the browser) and are renumbered
in order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ITEM_PLACEHOLDER",
    "MAX_DEPTH",
    "SHAPE",
    "VALUE",
    "Field",
    "escape_token",
    "form_for",
    "kind_of",
    "nullable",
    "pointer_of",
    "resolve",
    "unescape_pointer",
    "unescape_token",
]

VALUE, SHAPE = "value:", "shape:"
# Stands for an array index in an item template; the page's script replaces it.
ITEM_PLACEHOLDER = "__index__"
_DATE_PATTERNS = (r"^\d{4}-\d{2}-\d{2}$", r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_REQUIRED = re.compile(r"^'(?P<name>(?:[^'\\]|\\.)*)' is a required property$")
# Deeper than any output a person reviews field by field: past it, JSON text.
MAX_DEPTH = 12


# A text longer than this many characters gets a text box, not a one-line input.
_ONE_LINE = 60


@dataclass
class Field:
    """One value of the form. ``kind``: object, array, text, number, integer, boolean,
    enum, date or json (a JSON text box)."""

    pointer: str
    label: str
    kind: str
    required: bool = False
    present: bool = True
    value: Any = None  # scalars as the input shows them (text); json: the JSON text
    children: list[Field] = field(default_factory=list)
    item: Field | None = None  # arrays: the template of a new item
    options: list[tuple[str, str]] = field(default_factory=list)  # enum: (value, label)
    limits: dict[str, Any] = field(default_factory=dict)  # min, max, step, minlength, ...
    hint: str = ""
    errors: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)

    @property
    def input_name(self) -> str:
        return VALUE + self.pointer

    @property
    def shape_name(self) -> str:
        return SHAPE + self.pointer

    @property
    def input_type(self) -> str:
        """The HTML input type of a number, date or text field. A date input is only used
        for a value it can show (YYYY-MM-DD, or none): it would blank out any other."""
        if self.kind in ("number", "integer"):
            # A number input shows nothing for text that is not a number (a value typed
            # where no browser typed it, shown again with its error).
            shown = str(self.value).strip()
            return "number" if re.fullmatch(r"(-?\d+(\.\d+)?([eE][-+]?\d+)?)?", shown) else "text"
        if self.kind == "date" and re.fullmatch(r"(\d{4}-\d{2}-\d{2})?", str(self.value)):
            return "date"
        return "text"

    @property
    def size(self) -> int:
        """Its input's width in characters: as wide as its value, within 8 and 60 (the
        form's column bounds it too)."""
        return min(60, max(8, len(str(self.value or "")) + 2))

    @property
    def rows(self) -> int:
        """A text longer than a line is a text box of this many rows (0: one line)."""
        length = len(str(self.value or ""))
        if self.kind != "text" or length <= _ONE_LINE:
            return 0
        return min(8, length // _ONE_LINE + 1)

    @property
    def dom_id(self) -> str:
        """An id safe in HTML and CSS: the pointer's characters spelled out."""
        return "f" + "".join(c if c.isalnum() else f"-{ord(c):x}-" for c in self.pointer)

    def walk(self) -> Iterable[Field]:
        yield self
        for child in self.children:
            yield from child.walk()


def escape_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape_token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def unescape_pointer(pointer: str) -> list[str]:
    """A JSON Pointer's tokens (RFC 6901)."""
    if not pointer:
        return []
    return [unescape_token(t) for t in pointer.lstrip("/").split("/")]


def pointer_of(tokens: Sequence[str | int]) -> str:
    return "".join(f"/{escape_token(str(t))}" for t in tokens)


def form_for(
    schema: Mapping[str, Any],
    value: Any,
    *,
    hidden: Sequence[str] = (),
    evidence: Mapping[str, list[dict[str, Any]]] | None = None,
    errors: Sequence[Mapping[str, Any]] = (),
    typed: Mapping[str, str] | None = None,
) -> tuple[Field, list[str]]:
    """The form of ``value`` under ``schema`` (its top-level properties in ``hidden`` left
    out), with each pointer's ``evidence`` and ``errors`` ({"path", "message"}) attached;
    and the errors no field of the form shows. ``typed``: text a reviewer typed, by
    pointer, shown instead of the value (what could not be read as its type)."""
    builder = _Builder(schema, evidence or {}, typed or {})
    root = builder.build(schema, value, "", "Output", True, True, 0, hidden=hidden)
    by_pointer = {f.pointer: f for f in root.walk()}
    unplaced = []
    for error in errors:
        pointer, message = str(error.get("path", "")), str(error.get("message", ""))
        if (named := _REQUIRED.match(message)) and (
            target := by_pointer.get(f"{pointer}/{escape_token(named['name'])}")
        ):
            target.errors.append("a value is required")
            continue
        holder = _nearest(by_pointer, pointer)
        if holder is None or (holder is root and pointer):
            unplaced.append(f"{pointer or '/'}: {message}")
        else:
            holder.errors.append(message)
    return root, unplaced


def _nearest(by_pointer: Mapping[str, Field], pointer: str) -> Field | None:
    tokens = unescape_pointer(pointer)
    while True:
        if (found := by_pointer.get(pointer_of(tokens))) is not None:
            return found
        if not tokens:
            return None
        tokens.pop()


class _Builder:
    def __init__(
        self,
        root: Mapping[str, Any],
        evidence: Mapping[str, list[dict[str, Any]]],
        typed: Mapping[str, str],
    ) -> None:
        self.root = root
        self.evidence = evidence
        self.typed = typed

    def build(
        self,
        schema: Mapping[str, Any],
        value: Any,
        pointer: str,
        label: str,
        required: bool,
        present: bool,
        depth: int,
        *,
        hidden: Sequence[str] = (),
    ) -> Field:
        schema = resolve(self.root, schema)
        kind = kind_of(schema) if depth < MAX_DEPTH else "json"
        made = Field(
            pointer,
            label,
            kind,
            required=required,
            present=present,
            hint=str(schema.get("description", "")),
            evidence=list(self.evidence.get(pointer, ())),
        )
        if kind == "object" and (value is None or isinstance(value, dict)):
            self._object(made, schema, value or {}, depth, hidden)
        elif kind == "array" and (value is None or isinstance(value, list)):
            self._array(made, schema, value or [], depth)
        else:
            if kind in ("object", "array"):  # a value of another shape: show it as it is
                made.kind = kind = "json"
            made.value = self.typed.get(pointer, _shown(kind, value, present))
            made.options = _options(schema) if kind == "enum" else []
            made.limits = _limits(schema, kind)
        return made

    def _object(
        self,
        made: Field,
        schema: Mapping[str, Any],
        value: Mapping[str, Any],
        depth: int,
        hidden: Sequence[str],
    ) -> None:
        properties: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        names = [*properties, *(k for k in value if k not in properties)]
        for name in names:
            if name in hidden:
                continue
            made.children.append(
                self.build(
                    properties.get(name, {}),
                    value.get(name),
                    f"{made.pointer}/{escape_token(name)}",
                    _label(name),
                    name in required,
                    name in value,
                    depth + 1,
                )
            )

    def _array(self, made: Field, schema: Mapping[str, Any], value: list[Any], depth: int) -> None:
        items: Mapping[str, Any] = schema.get("items", {})
        for index, item in enumerate(value):
            pointer = f"{made.pointer}/{index}"
            made.children.append(
                self.build(items, item, pointer, f"Item {index + 1}", True, True, depth + 1)
            )
        made.item = self.build(
            items, None, f"{made.pointer}/{ITEM_PLACEHOLDER}", "New item", True, False, depth + 1
        )
        made.limits = {k: schema[k] for k in ("minItems", "maxItems") if k in schema}


def resolve(root: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` with a local ``$ref`` followed, and ``X or null`` read as X."""
    for _ in range(32):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            target: Any = root
            for token in unescape_pointer(ref[1:]):
                target = target.get(token, {}) if isinstance(target, Mapping) else {}
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            continue
        variants = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(variants, list):
            kept = [v for v in variants if v != {"type": "null"}]
            if len(kept) == 1 and len(variants) == 2:
                schema = {
                    **{k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")},
                    **kept[0],
                }
                continue
        break
    return schema


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    return [t for t in declared if isinstance(t, str)] if isinstance(declared, list) else []


def kind_of(schema: Mapping[str, Any]) -> str:
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return "enum"
    if "const" in schema:
        return "json"
    if "anyOf" in schema or "oneOf" in schema or "allOf" in schema or "prefixItems" in schema:
        return "json"
    types = [t for t in _types(schema) if t != "null"]
    if len(types) != 1:
        return "json"
    kind = types[0]
    if kind == "string":
        dated = schema.get("format") == "date" or schema.get("pattern") in _DATE_PATTERNS
        return "date" if dated else "text"
    if kind == "object":
        open_ended = "properties" not in schema and schema.get("additionalProperties") not in (
            None,
            False,
        )
        return "json" if open_ended else "object"
    return kind if kind in ("number", "integer", "boolean", "array") else "json"


def nullable(schema: Mapping[str, Any]) -> bool:
    return "null" in _types(schema)


def _shown(kind: str, value: Any, present: bool) -> Any:
    if not present or value is None:
        return "" if kind != "json" or not present else "null"
    if kind == "json":
        return json.dumps(value, indent=2, ensure_ascii=False)
    if kind == "enum":
        return json.dumps(value, ensure_ascii=False)
    if kind == "boolean":
        return "true" if value is True else "false" if value is False else json.dumps(value)
    return value if isinstance(value, str) else json.dumps(value)


def _options(schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (json.dumps(v, ensure_ascii=False), v if isinstance(v, str) else json.dumps(v))
        for v in schema["enum"]
    ]


def _limits(schema: Mapping[str, Any], kind: str) -> dict[str, Any]:
    names = {
        "number": {"minimum": "min", "maximum": "max"},
        "integer": {"minimum": "min", "maximum": "max"},
        "text": {"minLength": "minlength", "maxLength": "maxlength"},
    }.get(kind, {})
    limits = {html: schema[key] for key, html in names.items() if key in schema}
    if kind == "number":
        limits["step"] = "any"
    return limits


def _label(name: str) -> str:
    return name.replace("_", " ").strip().capitalize() or name
