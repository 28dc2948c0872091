"""The fake provider's reader, fed what the pipeline sends, recovers each contract's facts.

The reader sees only the text: the ground truth of docpipe_dev.samples is used here to check it,
never by the fake itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from docpipe.pipelines.evidence import locate_quote, normalised
from docpipe_dev.samples import SampleContract, sample_contracts
from docpipe_fake_llm.faults import invent_quotes
from docpipe_fake_llm.reader import StepInputError, answer_step

CONTRACTS = sample_contracts(10)


def section_messages(contract: SampleContract, *, with_heading: bool) -> list[str]:
    """The extract_fields user messages of one document: the preamble as section 0, then one
    per section found by extract_sections, cut at the headings it returned."""
    text = contract.text
    sections = answer_step("extract_sections", text)["sections"]
    starts = [text.index(section["heading"]) for section in sections]
    messages = [f"Section 0. Preamble\n\n{text[: starts[0]].strip()}"]
    for section, start, end in zip(sections, starts, [*starts[1:], len(text)], strict=True):
        body_start = start if with_heading else start + len(section["heading"])
        body = text[body_start:end].strip()
        messages.append(f"Section {section['number']}. {section['title']}\n\n{body}")
    return messages


def merged_fields(messages: list[str]) -> dict[str, Any]:
    """The fields of all sections; a field stated twice must be stated the same way."""
    merged: dict[str, Any] = {}
    for message in messages:
        for name, read in answer_step("extract_fields", message)["fields"].items():
            value = read["value"]
            assert merged.get(name, value) == value, f"{name} differs in {message[:40]!r}"
            merged[name] = value
    return merged


@pytest.mark.parametrize("with_heading", [False, True], ids=["body", "heading+body"])
@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: c.slug)
def test_fields_read_section_by_section_merge_to_the_ground_truth(
    contract: SampleContract, with_heading: bool
) -> None:
    fields = merged_fields(section_messages(contract, with_heading=with_heading))
    assert fields == contract.expected


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: c.slug)
def test_headings_are_returned_exactly_as_written(contract: SampleContract) -> None:
    sections = answer_step("extract_sections", contract.text)["sections"]
    lines = contract.text.splitlines()
    assert [s["number"] for s in sections] == [str(n) for n in range(1, len(sections) + 1)]
    for section in sections:
        assert section["heading"] in lines
        assert section["heading"] == f"{section['number']}. {section['title'].upper()}"


def test_the_preamble_alone_gives_parties_type_and_date() -> None:
    contract = CONTRACTS[0]
    fields = answer_step("extract_fields", section_messages(contract, with_heading=False)[0])
    assert {name: read["value"] for name, read in fields["fields"].items()} == {
        name: contract.expected[name] for name in ("parties", "contract_type", "effective_date")
    }


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: c.slug)
def test_every_value_is_quoted_from_its_section_on_one_line(contract: SampleContract) -> None:
    quoted = 0
    for message in section_messages(contract, with_heading=True):
        body = message.split("\n\n", 1)[1]
        for name, read in answer_step("extract_fields", message)["fields"].items():
            assert "\n" not in read["quote"] and len(read["quote"]) <= 1000
            span = locate_quote(body, read["quote"])
            assert span is not None, f"{name}: {read['quote']!r}"
            assert normalised(body[span[0] : span[1]]) == normalised(read["quote"])
            quoted += 1
    assert quoted >= len(contract.expected)


def test_an_invented_quote_replaces_every_quote_and_keeps_the_values() -> None:
    message = section_messages(CONTRACTS[0], with_heading=False)[0]
    honest = answer_step("extract_fields", message)
    invented = invent_quotes(honest)
    assert invented["fields"].keys() == honest["fields"].keys()
    for name, read in invented["fields"].items():
        assert read["value"] == honest["fields"][name]["value"]
        assert locate_quote(CONTRACTS[0].text, read["quote"]) is None
    assert invent_quotes({"sections": []}) == {"sections": []}


def test_a_section_without_facts_gives_no_fields() -> None:
    message = "Section 12. Notices\n\nAny notice shall be in writing and delivered by hand."
    assert answer_step("extract_fields", message) == {"fields": {}}


def test_text_without_numbered_headings_has_no_sections() -> None:
    assert answer_step("extract_sections", "A letter.\n\nIt has 2 paragraphs.") == {"sections": []}


def test_the_summary_names_the_parties_type_value_and_term() -> None:
    contract = CONTRACTS[1]
    request = {"fields": contract.expected, "section_titles": ["Services", "Fees and Payment"]}
    answer = answer_step("summarize", json.dumps(request))
    summary = answer["summary"]
    for party in contract.expected["parties"]:
        assert party["name"] in summary
    assert contract.expected["contract_type"] in summary
    assert f"{contract.expected['total_value']['amount']:,}" in summary
    assert f"{contract.expected['term_months']} months" in summary
    assert 1 <= len(answer["key_points"]) <= 8
    assert 0 <= len(answer["risk_flags"]) <= 5


def test_the_summary_flags_auto_renewal_and_a_cap_above_twice_the_value() -> None:
    fields = {
        "total_value": {"amount": 100_000, "currency": "USD"},
        "liability_cap": {"amount": 500_000, "currency": "USD"},
        "auto_renewal": True,
    }
    flags = answer_step("summarize", json.dumps({"fields": fields, "section_titles": []}))
    assert any("twice" in flag for flag in flags["risk_flags"])
    assert any("automatically" in flag for flag in flags["risk_flags"])


def test_summarize_refuses_a_user_message_that_is_not_json() -> None:
    with pytest.raises(StepInputError) as refused:
        answer_step("summarize", "Please summarise this contract.")
    assert refused.value.code == "invalid_summarize_input"


def test_an_unknown_step_is_refused() -> None:
    with pytest.raises(StepInputError) as refused:
        answer_step("translate", "text")
    assert refused.value.code == "unknown_step"
