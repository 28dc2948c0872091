"""Being wrong on purpose: a share of the values a model answers made wrong or left out, and
values invented, decided by a seed so that a test knows the accuracy it should measure.

``error_rates`` maps a model name or a prompt version (``extract_fields@v2``) to the share
of stated values to get wrong; a request matching both gets ``1 - (1 - a)(1 - b)``. Of the
values chosen, 60 % get a wrong value of the right type and 40 % are left out.
``extra_rate`` is the chance, per call and per field the text does not state, that a value
is invented (with a quote the text does not contain).

Every choice is a hash of the seed, the model, the prompt version, the text sent and the
field: the same request always gets the same answer, whichever worker sends it and however
often, and a change of prompt version draws anew.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Mistakes"]

WRONG_SHARE = 0.6
_CURRENCIES = ("USD", "EUR", "GBP")


@dataclass(frozen=True)
class Mistakes:
    """How wrong the model is, and the seed of its choices."""

    error_rates: Mapping[str, float] = field(default_factory=dict)
    extra_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        rates = [*self.error_rates.values(), self.extra_rate]
        if any(not 0 <= r <= 1 for r in rates):
            raise ValueError("error rates are shares from 0 to 1")

    def rate(self, model: str, prompt_version: str | None) -> float:
        right = 1.0
        for selector in (model, prompt_version):
            if selector is not None:
                right *= 1 - self.error_rates.get(selector, 0.0)
        return 1 - right

    def as_dict(self) -> dict[str, Any]:
        return {
            "error_rates": dict(self.error_rates),
            "extra_rate": self.extra_rate,
            "seed": self.seed,
        }

    def apply(
        self,
        answer: Any,
        *,
        model: str,
        prompt_version: str | None,
        text: str,
        schema: Mapping[str, Any] | None,
    ) -> Any:
        """``answer`` with this model's mistakes (unchanged when its rate is 0)."""
        rate = self.rate(model, prompt_version)
        if not isinstance(answer, dict) or (rate == 0 and self.extra_rate == 0):
            return answer
        digest = hashlib.sha256(text.encode()).hexdigest()
        draw = _Draw(f"{self.seed}|{model}|{prompt_version}|{digest}")
        quoted = isinstance(answer.get("fields"), dict)
        values: dict[str, Any] = dict(answer["fields"] if quoted else answer)
        declared = _declared(schema, quoted)
        for name in sorted(values):
            held = values[name]
            value = held.get("value") if quoted and isinstance(held, dict) else held
            if value is None or draw(name, "error") >= rate:
                continue
            if draw(name, "kind") < WRONG_SHARE:
                wrong = _wrong(value, declared.get(name, {}), draw(name, "how"))
                values[name] = {**held, "value": wrong} if quoted else wrong
            else:
                del values[name]
        for name, value_schema in declared.items():
            if values.get(name) is None and draw(name, "extra") < self.extra_rate:
                invented = _invented(value_schema)
                if invented is not None:
                    quote = "as the parties agreed in a side letter"  # in no document
                    values[name] = {"value": invented, "quote": quote} if quoted else invented
        return {**answer, "fields": values} if quoted else values


class _Draw:
    """Uniform numbers in [0, 1) from a hash: the same key, the same number."""

    def __init__(self, base: str) -> None:
        self.base = base

    def __call__(self, name: str, purpose: str) -> float:
        digest = hashlib.sha256(f"{self.base}|{name}|{purpose}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64


def _declared(schema: Mapping[str, Any] | None, quoted: bool) -> dict[str, Mapping[str, Any]]:
    """The schemas of the values the answer may hold, by name."""
    properties = _plain(schema or {}).get("properties", {})
    if quoted:
        fields = _plain(properties.get("fields", {})).get("properties", {})
        return {
            name: _plain(_plain(s).get("properties", {}).get("value", {}))
            for name, s in fields.items()
            if isinstance(s, Mapping)
        }
    return {name: _plain(s) for name, s in properties.items() if isinstance(s, Mapping)}


def _plain(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` without the null a strict schema allows beside it (``anyOf [X, null]``,
    ``type: [X, "null"]``)."""
    branches = [b for b in schema.get("anyOf", ()) if b.get("type") != "null"]
    if len(branches) == 1:
        return _plain(branches[0])
    kind = schema.get("type")
    if isinstance(kind, list) and len(types := [t for t in kind if t != "null"]) == 1:
        return {**schema, "type": types[0]}
    return schema


def _wrong(value: Any, schema: Mapping[str, Any], how: float) -> Any:
    """A value of the same type (and schema) as ``value`` that is not equal to it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1 + int(how * 5)
    if isinstance(value, float):
        return round(value * (1.5 + how), 2)
    if isinstance(value, str):
        options = [o for o in schema.get("enum", ()) if o != value]
        if options:
            return options[int(how * len(options))]
        if value in _CURRENCIES:
            return _CURRENCIES[(_CURRENCIES.index(value) + 1) % len(_CURRENCIES)]
        if len(value) == 10 and value[4] == "-" and value[7] == "-":  # YYYY-MM-DD
            return f"{int(value[:4]) - 1}{value[4:]}"
        return f"{value} (amended)"
    if isinstance(value, list) and value:
        item_schema = _plain(schema.get("items", {}))
        return [_wrong(value[0], item_schema, how), *value[1:]]
    if isinstance(value, dict) and value:
        name = sorted(value)[0]
        sub = _plain(schema.get("properties", {}).get(name, {}))
        return {**value, name: _wrong(value[name], sub, how)}
    return value


def _invented(schema: Mapping[str, Any]) -> Any:
    """A plausible value the text never stated (None: none fits the schema)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "integer":
        return 30
    if kind == "number":
        return 1000.0
    if kind == "boolean":
        return True
    if kind == "string":
        return "2020-01-01" if "\\d{4}" in str(schema.get("pattern", "")) else "Invented Ltd"
    if kind == "object":
        inner = {n: _invented(_plain(s)) for n, s in schema.get("properties", {}).items()}
        if "currency" in inner:
            inner["currency"] = "USD"
        return inner if all(v is not None for v in inner.values()) else None
    return None
