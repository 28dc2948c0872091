"""Answers to any JSON Schema, derived from the text the request sends.

When a request asks for ``response_format: json_schema`` and names no step the fake knows,
the answer is built from the schema alone: deterministic (the same text and schema give the
same answer), valid against the schema, and made of the document's own words and numbers
where the schema leaves room, so that any user's pipeline runs end to end without a model.

Covers strict mode's subset of JSON Schema (objects, arrays, strings with pattern/format/
enum/const, numbers with bounds and multipleOf, booleans, null, anyOf, local $ref) plus
minLength/maxLength; a pattern is satisfied by generating a string from the regex itself.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from docpipe_fake_llm import regex_strings

__all__ = ["answer_schema", "fit_to_schema"]

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MAX_DEPTH = 12
_FORMATS = {
    "date": "2025-01-{day:02d}",
    "date-time": "2025-01-{day:02d}T09:00:00Z",
    "time": "09:{day:02d}:00",
    "duration": "P{day}D",
    "email": "{word}@example.com",
    "hostname": "{word}.example.com",
    "ipv4": "192.0.2.{day}",
    "ipv6": "2001:db8::{day}",
    "uri": "https://example.com/{word}",
    "uuid": "00000000-0000-4000-8000-{day:012d}",
}


def answer_schema(schema: Mapping[str, Any], text: str) -> Any:
    """A value valid against ``schema``, derived deterministically from ``text``."""
    return _Writer(schema, text).value(schema, "#", 0)


def fit_to_schema(value: Any, schema: Mapping[str, Any], text: str) -> Any:
    """``value`` with what a strict ``schema`` requires and it lacks filled in: null where
    null is allowed (how strict mode spells "not stated"), a derived value otherwise."""
    writer = _Writer(schema, text)
    return writer.fit(value, schema, "#", 0)


class _Writer:
    def __init__(self, root: Mapping[str, Any], text: str) -> None:
        self.root = root
        self.text = text

    # Read from the text only when a value must be derived: most answers need none, and
    # scanning every request's text up front was an eighth of the fake provider's CPU with
    # hundreds of calls a second (bench.in_flight).
    @cached_property
    def words(self) -> list[str]:
        return _WORD.findall(self.text) or ["document"]

    @cached_property
    def numbers(self) -> list[float]:
        return [float(n) for n in _NUMBER.findall(self.text)] or [1.0]

    @cached_property
    def sentences(self) -> list[str]:
        parts = re.split(r"(?<=[.!?])\s+|\n+", self.text)
        return [s.strip() for s in parts if s.strip()]

    def pick(self, where: str, size: int) -> int:
        digest = hashlib.sha256(f"{where}\0{self.text}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % max(1, size)

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return schema
        node: Any = self.root
        for part in ref.lstrip("#").strip("/").split("/") if ref != "#" else []:
            node = node.get(part, {}) if isinstance(node, Mapping) else {}
        return node if isinstance(node, Mapping) else {}

    def value(self, schema: Mapping[str, Any], where: str, depth: int) -> Any:
        schema = self.resolve(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][self.pick(where, len(schema["enum"]))]
        branches = schema.get("anyOf") or schema.get("oneOf")
        if branches:
            # Deep down, a null branch ends recursive schemas; above, a real value is nicer.
            usable = [b for b in branches if not _is_null(self.resolve(b))] or branches
            if depth >= _MAX_DEPTH and len(usable) < len(branches):
                return None
            return self.value(usable[self.pick(where, len(usable))], where, depth + 1)
        types = schema.get("type", "string")
        types = [types] if isinstance(types, str) else list(types)
        chosen = [t for t in types if t != "null"] or ["null"]
        if depth >= _MAX_DEPTH and "null" in types:
            return None
        kind = chosen[self.pick(where + "/type", len(chosen))]
        writer = getattr(self, f"_{kind}")
        return writer(schema, where, depth)

    def _null(self, schema: Mapping[str, Any], where: str, depth: int) -> None:
        return None

    def _boolean(self, schema: Mapping[str, Any], where: str, depth: int) -> bool:
        return self.pick(where, 2) == 1

    def _object(self, schema: Mapping[str, Any], where: str, depth: int) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        return {
            name: self.value(sub, f"{where}/{name}", depth + 1) for name, sub in properties.items()
        }

    def _array(self, schema: Mapping[str, Any], where: str, depth: int) -> list[Any]:
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", max(low, 3)))
        count = low if depth >= _MAX_DEPTH else min(high, max(low, 1 + self.pick(where, 3)))
        items = schema.get("items")
        item_schema = items if isinstance(items, Mapping) else {}
        return [self.value(item_schema, f"{where}/{i}", depth + 1) for i in range(count)]

    def _integer(self, schema: Mapping[str, Any], where: str, depth: int) -> int:
        number = self._number(schema, where, depth, integer=True)
        return int(number)

    def _number(
        self, schema: Mapping[str, Any], where: str, depth: int, *, integer: bool = False
    ) -> float:
        low, high = _bounds(schema, integer)
        step = schema.get("multipleOf")
        guess = self.numbers[self.pick(where, len(self.numbers))]
        if integer:
            guess = float(round(guess))
        if step:
            low_k = math.ceil(low / step) if low != -math.inf else None
            high_k = math.floor(high / step) if high != math.inf else None
            k = round(guess / step)
            if low_k is not None:
                k = max(k, low_k)
            if high_k is not None:
                k = min(k, high_k)
            value = k * step
            return float(int(value)) if integer else float(value)
        value = min(max(guess, low), high)
        if integer:
            value = float(math.ceil(value)) if value != math.ceil(value) else value
            if value > high:
                value = float(math.floor(high))
        return value

    def _string(self, schema: Mapping[str, Any], where: str, depth: int) -> str:
        low = int(schema.get("minLength", 0))
        high = int(schema.get("maxLength", 10_000))
        if isinstance(schema.get("pattern"), str):
            text = self._matching(schema["pattern"], where, low, high)
            if text is not None:
                return text
        fmt = schema.get("format")
        if fmt in _FORMATS:
            day = 1 + self.pick(where, 28)
            word = self.words[self.pick(where, len(self.words))].lower().strip("'-") or "doc"
            if fmt == "date" and (found := _DATE.search(self.text)):
                return found[0]
            return _FORMATS[fmt].format(day=day, word=word)
        text = self._phrase(where)
        if len(text) < low:
            text = (text + " ") * (low // max(1, len(text) + 1) + 1)
        return text[: max(low, min(high, len(text)))].ljust(low, "x")

    def _phrase(self, where: str) -> str:
        if self.sentences and self.pick(where + "/s", 2):
            sentence = self.sentences[self.pick(where, len(self.sentences))]
            return sentence[:200]
        start = self.pick(where, len(self.words))
        return " ".join(self.words[start : start + 3])

    def _matching(self, pattern: str, where: str, low: int, high: int) -> str | None:
        try:
            compiled = re.compile(pattern)
        except re.error:
            return None
        for word in (self._phrase(where), *self.words[:50]):
            if compiled.search(word) and low <= len(word) <= high:
                return str(word)
        try:
            generated = regex_strings.generate(pattern, seed=self.pick(where, 2**31))
        except (ValueError, re.error):
            return None
        if generated is not None and compiled.search(generated) and low <= len(generated) <= high:
            return generated
        return None

    def fit(self, value: Any, schema: Mapping[str, Any], where: str, depth: int) -> Any:
        schema = self.resolve(schema)
        if isinstance(value, dict) and isinstance(schema.get("properties"), Mapping):
            out = {}
            for name, sub in schema["properties"].items():
                sub_schema = self.resolve(sub)
                if name in value:
                    out[name] = self.fit(value[name], sub_schema, f"{where}/{name}", depth + 1)
                elif _allows_null(sub_schema):
                    out[name] = None
                else:
                    out[name] = self.value(sub_schema, f"{where}/{name}", depth + 1)
            return out
        if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            return [
                self.fit(v, schema["items"], f"{where}/{i}", depth + 1) for i, v in enumerate(value)
            ]
        return value


def _bounds(schema: Mapping[str, Any], integer: bool) -> tuple[float, float]:
    low = float(schema.get("minimum", -math.inf))
    high = float(schema.get("maximum", math.inf))
    nudge = 1.0 if integer else 1e-6
    if "exclusiveMinimum" in schema:
        low = max(low, float(schema["exclusiveMinimum"]) + nudge)
    if "exclusiveMaximum" in schema:
        high = min(high, float(schema["exclusiveMaximum"]) - nudge)
    return low, high


def _is_null(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") == "null"


def _allows_null(schema: Mapping[str, Any]) -> bool:
    declared = schema.get("type")
    if declared == "null" or (isinstance(declared, list) and "null" in declared):
        return True
    return any(_is_null(b) for b in schema.get("anyOf", ()) if isinstance(b, Mapping))
