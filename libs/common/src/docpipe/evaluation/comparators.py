"""How each field of a step's output is compared with the expected one: defaults from the
output schema's types, overridden by the pipeline, in Python and in files alike::

    compare:
      fields.total_value.amount: {tolerance: 0.5}           # absolute
      fields.term_months: {relative: 0.05}
      fields.governing_law: {compare: fuzzy, threshold: 0.85}
      fields.parties: {key: name}                           # pair rows by their name
      fields.contract_type: {weight: 2}
      found_in: {compare: none}                             # not scored

A path is a dot path into the output; ``[]`` stands for every row of a list
(``fields.parties[].role``). The defaults:

- strings: exact after normalising case, whitespace and quotation marks (``text``);
- numbers and integers: equal within a tolerance (``number``; absolute 1e-9, relative 1e-6);
- strings the schema declares as dates (``format: date`` or a YYYY-MM-DD pattern): the same
  day however it is written (``date``);
- enums, booleans and anything else: equal as JSON (``exact``);
- objects: field by field; lists: rows paired first (by ``key``, else by the best
  assignment), then compared cell by cell.

:func:`field_tree` checks every override against the schema when the pipeline loads: a path
the schema does not declare, or a comparator that does not fit the type, raises
:class:`ComparatorError` naming the path. Pure functions: no database, no model.
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

__all__ = [
    "COMPARATORS",
    "ArrayNode",
    "ComparatorError",
    "Leaf",
    "Node",
    "ObjectNode",
    "field_tree",
    "normalised_text",
    "parse_overrides",
]

# What a field may be compared with; "none": not scored.
COMPARATORS = ("text", "number", "date", "exact", "fuzzy", "none")
_FIT = {  # which comparators fit which JSON types
    "string": {"text", "date", "exact", "fuzzy", "none"},
    "number": {"number", "exact", "none"},
    "integer": {"number", "exact", "none"},
    "boolean": {"exact", "none"},
    "any": {"text", "number", "date", "exact", "fuzzy", "none"},
}
_OPTIONS = {"compare", "tolerance", "relative", "threshold", "key", "weight"}
DEFAULT_ABSOLUTE = 1e-9
DEFAULT_RELATIVE = 1e-6
DEFAULT_THRESHOLD = 0.9
_DATE_PATTERNS = {r"^\d{4}-\d{2}-\d{2}$", r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}


class ComparatorError(ValueError):
    """A comparator override is wrong; ``path`` is the override's key."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"compare {path}: {message}")
        self.path = path


@dataclass(frozen=True)
class Leaf:
    """A value compared as a whole."""

    path: str
    compare: str
    weight: float = 1.0
    tolerance: float = DEFAULT_ABSOLUTE
    relative: float = DEFAULT_RELATIVE
    threshold: float = DEFAULT_THRESHOLD

    def equal(self, expected: Any, got: Any) -> bool:
        """Whether ``got`` counts as ``expected`` (both present)."""
        if self.compare == "number":
            x, y = _number(expected), _number(got)
            if x is None or y is None:
                return _canonical(expected) == _canonical(got)
            return math.isclose(x, y, rel_tol=self.relative, abs_tol=self.tolerance)
        if self.compare == "date":
            da, db = _date(expected), _date(got)
            if da is None or db is None:
                return normalised_text(expected) == normalised_text(got)
            return da == db
        if self.compare == "text":
            return normalised_text(expected) == normalised_text(got)
        if self.compare == "fuzzy":
            a, b = normalised_text(expected), normalised_text(got)
            return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= self.threshold
        return _canonical(expected) == _canonical(got)


@dataclass(frozen=True)
class ObjectNode:
    """An object compared property by property."""

    path: str
    properties: Mapping[str, Node]


@dataclass(frozen=True)
class ArrayNode:
    """A list whose rows are paired (by ``key``, a path inside a row, else by the best
    assignment), then compared cell by cell."""

    path: str
    item: Node
    key: str | None = None


Node = Leaf | ObjectNode | ArrayNode


@dataclass
class _Override:
    options: dict[str, Any]
    used: bool = field(default=False)


def parse_overrides(spec: Any) -> dict[str, dict[str, Any]]:
    """The overrides as ``{path: options}``, each option checked for its own form (not yet
    against a schema); ComparatorError otherwise."""
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise ComparatorError("", "must be a mapping of field paths to options")
    parsed: dict[str, dict[str, Any]] = {}
    for path, options in spec.items():
        if not isinstance(path, str) or not path:
            raise ComparatorError(str(path), "a field path is a non-empty string")
        if isinstance(options, str):
            options = {"compare": options}
        if not isinstance(options, Mapping):
            raise ComparatorError(path, "options are a mapping (or a comparator's name)")
        if unknown := set(options) - _OPTIONS:
            raise ComparatorError(
                path,
                f"unknown option {sorted(unknown)[0]!r} (known: {', '.join(sorted(_OPTIONS))})",
            )
        if "compare" in options and options["compare"] not in COMPARATORS:
            raise ComparatorError(
                path, f"unknown comparator {options['compare']!r} (known: {', '.join(COMPARATORS)})"
            )
        for name in ("tolerance", "relative", "weight"):
            if name in options and not _non_negative(options[name]):
                raise ComparatorError(path, f"{name} must be a number >= 0")
        if "threshold" in options and not (
            _non_negative(options["threshold"]) and options["threshold"] <= 1
        ):
            raise ComparatorError(path, "threshold must be a number from 0 to 1")
        if "key" in options and not (isinstance(options["key"], str) and options["key"]):
            raise ComparatorError(path, "key is the path of a field inside a row")
        parsed[path] = dict(options)
    return parsed


def field_tree(schema: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]]) -> Node:
    """The comparison of a step's output: a tree of nodes from ``schema`` with the
    ``overrides`` applied (see :func:`parse_overrides`); ComparatorError for an override the
    schema does not fit."""
    pending = {path: _Override(dict(options)) for path, options in overrides.items()}
    tree = _node(schema, "", pending, 1.0, None)
    for path, override in pending.items():
        if not override.used:
            raise ComparatorError(path, "the output schema declares no such field")
    return tree


def _node(
    schema: Mapping[str, Any],
    path: str,
    pending: dict[str, _Override],
    weight: float,
    inherited: str | None,
) -> Node:
    override = pending.get(path)
    options: dict[str, Any] = {}
    if override is not None:
        override.used = True
        options = override.options
    weight = float(options.get("weight", weight))
    compare = options.get("compare", inherited)
    kind = _kind(schema)
    if kind == "object" and compare in (None, "none") and "properties" in schema:
        _refuse(options, path, kind, allowed={"compare", "weight"})
        properties = {
            name: _node(sub, f"{path}.{name}" if path else name, pending, weight, compare)
            for name, sub in schema["properties"].items()
            if isinstance(sub, Mapping)
        }
        return ObjectNode(path, properties)
    if kind == "array" and compare in (None, "none"):
        _refuse(options, path, kind, allowed={"compare", "weight", "key"})
        items = schema.get("items")
        item = _node(
            items if isinstance(items, Mapping) else {}, f"{path}[]", pending, weight, compare
        )
        key = options.get("key")
        if key is not None:
            _check_key(item, path, key)
        return ArrayNode(path, item, key)
    if "key" in options:
        raise ComparatorError(path, f"key pairs the rows of a list; this is {kind}")
    default = _default_comparator(schema, kind)
    chosen = compare or default
    fitting = _FIT.get(kind, {"exact", "none"})
    if chosen not in fitting:
        raise ComparatorError(
            path, f"{chosen} does not fit a {kind} (fitting: {', '.join(sorted(fitting))})"
        )
    extra = {"tolerance", "relative"} if chosen == "number" else set()
    extra |= {"threshold"} if chosen == "fuzzy" else set()
    _refuse(options, path, f"{kind} compared as {chosen}", allowed={"compare", "weight", *extra})
    return Leaf(
        path or "(output)",
        chosen,
        weight,
        tolerance=float(options.get("tolerance", DEFAULT_ABSOLUTE)),
        relative=float(options.get("relative", DEFAULT_RELATIVE)),
        threshold=float(options.get("threshold", DEFAULT_THRESHOLD)),
    )


def _refuse(options: Mapping[str, Any], path: str, what: str, *, allowed: set[str]) -> None:
    if stray := sorted(set(options) - allowed):
        raise ComparatorError(path, f"{stray[0]} does not apply to a {what}")


def _check_key(item: Node, path: str, key: str) -> None:
    node: Node | None = item
    for part in key.split("."):
        node = node.properties.get(part) if isinstance(node, ObjectNode) else None
    if not isinstance(node, Leaf):
        raise ComparatorError(path, f"key {key!r} is not a field of its rows")


def _kind(schema: Mapping[str, Any]) -> str:
    if "enum" in schema or "const" in schema:
        return "enum"
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    types = [t for t in types if t != "null"]
    if len(types) == 1:
        return str(types[0])
    if not types and "properties" in schema:
        return "object"
    if not types and "items" in schema:
        return "array"
    return "any"


def _default_comparator(schema: Mapping[str, Any], kind: str) -> str:
    if kind in ("number", "integer"):
        return "number"
    if kind == "string":
        dated = schema.get("format") == "date" or schema.get("pattern") in _DATE_PATTERNS
        return "date" if dated else "text"
    return "exact"


def _non_negative(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


# --- normalising values -----------------------------------------------------------------------

_CURLY_DOUBLE = "".join(map(chr, (0x201C, 0x201D, 0x201E, 0xAB, 0xBB)))
_CURLY_SINGLE = "".join(map(chr, (0x2018, 0x2019, 0x201A, 0x60)))
_QUOTES = str.maketrans(dict.fromkeys(_CURLY_DOUBLE, '"') | dict.fromkeys(_CURLY_SINGLE, "'"))
_SPACE = re.compile(r"\s+")


def normalised_text(value: Any) -> str:
    """``value`` as text compared without case, runs of whitespace or curly quotes."""
    text = value if isinstance(value, str) else _canonical(value)
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES)
    return _SPACE.sub(" ", text).strip().casefold()


def _canonical(value: Any) -> str:
    """JSON values compared as JSON: key order does not matter, 1 and 1.0 are equal."""
    if isinstance(value, Mapping):
        inner = ",".join(f"{k!r}:{_canonical(v)}" for k, v in sorted(value.items()))
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return repr(int(value))
    return repr(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.replace(",", "").strip())
        except ValueError:
            return None
    return None


_DATE_FORMATS = (
    "%Y-%m-%d",
    "%Y/%m/%d",
    "%d.%m.%Y",
    "%B %d, %Y",
    "%B %d %Y",
    "%b %d, %Y",
    "%d %B %Y",
    "%d %b %Y",
    "%Y-%m-%dT%H:%M:%S",
)
_ORDINAL = re.compile(r"(?<=\d)(st|nd|rd|th)\b", re.I)


def _date(value: Any) -> date | None:
    """The day a string names in a common unambiguous form (never 03/04/2025: which is the
    month depends on who wrote it)."""
    if not isinstance(value, str):
        return None
    text = _SPACE.sub(" ", _ORDINAL.sub("", value)).strip()
    for form in _DATE_FORMATS:
        try:
            return datetime.strptime(text, form).date()
        except ValueError:
            continue
    return None
