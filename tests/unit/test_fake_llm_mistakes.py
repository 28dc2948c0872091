"""The fake provider wrong on purpose: the share of values it gets wrong is the rate it was
given, every answer stays within the step's schema, and every choice is the seed's."""

from __future__ import annotations

from typing import Any

import jsonschema

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.structured_output import strict_schema
from docpipe_dev.samples import sample_contracts
from docpipe_fake_llm.mistakes import Mistakes
from docpipe_fake_llm.reader import answer_step
from docpipe_fake_llm.schema_answers import fit_to_schema

ANSWER_SCHEMA = strict_schema(DOCUMENT_EXTRACT.step("extract_fields").answer_schemas[0])
MESSAGES = [
    f"Section 0. Preamble\n\n{contract.text}"  # one call per contract, all its fields
    for contract in sample_contracts(40)
]
TRUE = [answer_step("extract_fields", m)["fields"] for m in MESSAGES]


def answers(
    mistakes: Mistakes,
    model: str = "gpt-4o-mini",
    version: str = "v1",
    messages: list[str] = MESSAGES,
) -> list[Any]:
    return [
        fit_to_schema(
            mistakes.apply(
                answer_step("extract_fields", m),
                model=model,
                prompt_version=version,
                text=m,
                schema=ANSWER_SCHEMA,
            ),
            ANSWER_SCHEMA,
            m,
        )["fields"]
        for m in messages
    ]


def changes(got: list[Any], truth: list[Any] = TRUE) -> tuple[int, int, int, int]:
    """(stated values, made wrong, left out, invented) against the true answers."""
    stated = wrong = left_out = invented = 0
    for true, given in zip(truth, got, strict=True):
        for name, quoted in true.items():
            stated += 1
            value = (given.get(name) or {}).get("value")
            if value is None:
                left_out += 1
            elif value != quoted["value"]:
                wrong += 1
        invented += sum(1 for n, v in given.items() if n not in true and v is not None)
    return stated, wrong, left_out, invented


def test_a_rate_gets_that_share_of_values_wrong_or_left_out() -> None:
    got = answers(Mistakes({"gpt-4o-mini": 0.2}, seed=1))
    stated, wrong, left_out, invented = changes(got)
    share = (wrong + left_out) / stated
    assert stated > 400
    assert 0.16 < share < 0.24, share  # 0.2 with about 440 draws
    assert 0.45 < wrong / (wrong + left_out) < 0.75  # 60 % wrong, 40 % left out
    assert invented == 0
    for given in got:  # every answer still passes the step's strict schema
        jsonschema.validate({"fields": given}, ANSWER_SCHEMA)


def test_another_model_or_no_rate_is_right() -> None:
    mistakes = Mistakes({"gpt-4o-mini": 0.5}, seed=1)
    assert changes(answers(mistakes, model="gpt-4o"))[1:] == (0, 0, 0)
    assert changes(answers(Mistakes()))[1:] == (0, 0, 0)


def test_the_seed_decides_and_a_prompt_version_draws_anew() -> None:
    mistakes = Mistakes({"extract_fields@v3": 0.3}, seed=7)
    first = answers(mistakes, version="extract_fields@v3")
    assert answers(mistakes, version="extract_fields@v3") == first
    assert (
        answers(Mistakes({"extract_fields@v3": 0.3}, seed=8), version="extract_fields@v3") != first
    )
    assert changes(answers(mistakes, version="extract_fields@v2"))[1:] == (0, 0, 0)
    # A model's rate and a version's combine: 1 - (1 - 0.5)(1 - 0.5).
    assert Mistakes({"m": 0.5, "p@v1": 0.5}).rate("m", "p@v1") == 0.75


def test_invented_values_fit_the_schema_and_quote_nothing_in_the_text() -> None:
    # The title block alone states a few fields; the others are there to invent.
    heads = [f"Section 0. Preamble\n\n{m.split(chr(10) + chr(10), 2)[1]}" for m in MESSAGES]
    truth = [answer_step("extract_fields", m)["fields"] for m in heads]
    got = answers(Mistakes(extra_rate=0.5, seed=2), messages=heads)
    _, wrong, left_out, invented = changes(got, truth)
    assert (wrong, left_out) == (0, 0) and invented > 0
    for message, true, given in zip(heads, truth, got, strict=True):
        jsonschema.validate({"fields": given}, ANSWER_SCHEMA)
        for name, quoted in given.items():
            if name not in true and quoted is not None:
                assert quoted["quote"] not in message
