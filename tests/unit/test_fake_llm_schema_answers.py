"""The fake provider answers any schema of strict mode's subset with a valid, deterministic
answer made from the text it is sent (property-based: random schemas, random texts)."""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from docpipe.pipelines.structured_output import strict_schema
from docpipe_fake_llm.schema_answers import answer_schema, fit_to_schema

NAMES = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)
PATTERNS = st.sampled_from(
    [r"^[A-Z]{3}$", r"^\d{4}-\d{2}-\d{2}$", r"^INV-[0-9]{5}$", r"^(yes|no)$", r"^[a-z]+@x\.io$"]
)


def _strings() -> st.SearchStrategy[dict[str, Any]]:
    plain = st.just({"type": "string"})
    patterned = PATTERNS.map(lambda p: {"type": "string", "pattern": p})
    formatted = st.sampled_from(["date", "date-time", "email", "uuid", "ipv4"]).map(
        lambda f: {"type": "string", "format": f}
    )
    enums = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4, unique=True).map(
        lambda values: {"type": "string", "enum": values}
    )
    return st.one_of(plain, patterned, formatted, enums)


def _numbers() -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        kind = draw(st.sampled_from(["integer", "number"]))
        schema: dict[str, Any] = {"type": kind}
        low = draw(st.one_of(st.none(), st.integers(-1000, 1000)))
        if low is not None:
            schema["minimum"] = low
            schema["maximum"] = low + draw(st.integers(0, 500))
        if draw(st.booleans()):
            schema["multipleOf"] = draw(st.sampled_from([1, 2, 5, 10]))
            if low is not None:  # keep a multiple in range
                schema["maximum"] = low + 20
        return schema

    return build()


LEAVES = st.one_of(_strings(), _numbers(), st.just({"type": "boolean"}), st.just({"type": "null"}))


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.dictionaries(NAMES, children, min_size=1, max_size=5).flatmap(
        lambda props: st.sets(st.sampled_from(sorted(props))).map(
            lambda required: {"type": "object", "properties": props, "required": sorted(required)}
        )
    )
    arrays = st.tuples(children, st.integers(0, 2), st.integers(0, 3)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]}
    )
    unions = st.lists(children, min_size=2, max_size=3).map(lambda bs: {"anyOf": bs})
    nullable = children.map(
        lambda c: (
            {**c, "type": [c["type"], "null"]}
            if isinstance(c.get("type"), str) and c["type"] != "null"
            else c
        )
    )
    return st.one_of(objects, arrays, unions, nullable)


SCHEMAS = st.recursive(LEAVES, _extend, max_leaves=12).map(
    lambda s: {"type": "object", "properties": {"answer": s}, "required": ["answer"]}
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS, text=st.text(max_size=300))
def test_the_answer_to_any_strict_schema_validates_and_is_deterministic(
    schema: dict[str, Any], text: str
) -> None:
    strict = strict_schema(schema)
    answer = answer_schema(strict, text)
    jsonschema.validate(answer, strict, format_checker=jsonschema.FormatChecker())
    assert answer_schema(strict, text) == answer


def test_answers_are_made_of_the_documents_words_and_numbers() -> None:
    schema = strict_schema(
        {
            "type": "object",
            "properties": {"who": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["who", "n"],
        }
    )
    answer = answer_schema(schema, "Acme Widgets ordered 4217 bolts.")
    assert answer["n"] == 4217
    assert answer["who"] in "Acme Widgets ordered 4217 bolts." or answer["who"].split()[0] in {
        "Acme",
        "Widgets",
        "ordered",
        "bolts",
    }


def test_a_realistic_answer_is_fitted_to_a_strict_schema_with_nulls() -> None:
    schema = strict_schema(
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    )
    assert fit_to_schema({"a": 3}, schema, "text") == {"a": 3, "b": None}
