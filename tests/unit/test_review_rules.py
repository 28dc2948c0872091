"""Review rules: what each asks a person about, and every malformed rule refused when the
pipeline is defined, in Python and in files alike."""

from __future__ import annotations

from typing import Any

import pytest

from docpipe.pipelines.files import load_pipeline_file
from docpipe.pipelines.model import Pipeline, PipelineError, Step
from docpipe.pipelines.review import parse_rules, rule_reasons, sample_point

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confidence": {"type": "number"},
        "total": {"type": "object", "properties": {"amount": {"type": "number"}}},
        "parties": {"type": "array", "items": {"type": "string"}},
        "law": {"type": "string"},
        "evidence": {"type": "array"},
    },
}


def reasons(spec: Any, output: dict[str, Any], sample_at: float = 0.5) -> list[str]:
    return [r.kind for r in rule_reasons(parse_rules(spec, SCHEMA), output, sample_at)]


def test_a_threshold_asks_for_a_person_past_it_and_when_the_value_is_no_number() -> None:
    rule = [{"field": "confidence", "below": 0.8}, {"field": "total.amount", "above": 1000}]
    assert reasons(rule, {"confidence": 0.9, "total": {"amount": 10}}) == []
    assert reasons(rule, {"confidence": 0.5, "total": {"amount": 5000}}) == ["below", "above"]
    assert reasons(rule, {"total": {"amount": "a lot"}}) == ["below", "above"]


def test_missing_means_null_absent_or_empty() -> None:
    rule = [{"field": "law", "missing": True}, {"field": "parties", "missing": True}]
    assert reasons(rule, {"law": "Delaware", "parties": ["A"]}) == []
    assert reasons(rule, {"law": "", "parties": []}) == ["missing", "missing"]
    assert reasons(rule, {"law": None}) == ["missing", "missing"]


def test_list_lengths() -> None:
    rule = [{"field": "parties", "shorter_than": 2}, {"field": "parties", "longer_than": 3}]
    assert reasons(rule, {"parties": ["A", "B"]}) == []
    assert reasons(rule, {"parties": ["A"]}) == ["shorter_than"]
    assert reasons(rule, {"parties": list("ABCD")}) == ["longer_than"]


def test_always_and_unsupported_evidence() -> None:
    assert reasons("always", {}) == ["always"]
    unsupported = {
        "evidence": [
            {
                "field": "law",
                "value": "X",
                "quote": "q",
                "start": None,
                "end": None,
                "page": None,
                "section": None,
                "supported": False,
            }
        ]
    }
    assert reasons(["unsupported_evidence"], unsupported) == ["unsupported_evidence"]
    assert reasons(["unsupported_evidence"], {"evidence": []}) == []


def test_sampling_is_decided_by_the_document_and_picks_about_its_share() -> None:
    point = sample_point("a" * 64, "p:v1", "fields")
    assert point == sample_point("a" * 64, "p:v1", "fields")  # the same on every run
    assert point != sample_point("b" * 64, "p:v1", "fields")
    points = [sample_point(f"{i:064x}", "p:v1", "fields") for i in range(2000)]
    share = sum(p < 0.05 for p in points) / len(points)
    assert 0.03 < share < 0.07
    assert reasons([{"sample": 0.05}], {}, sample_at=0.01) == ["sample"]
    assert reasons([{"sample": 0.05}], {}, sample_at=0.06) == []


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("sometimes", "review must be 'always' or a list of rules"),
        (["typo"], "review rule 1: unknown rule 'typo'"),
        ([{"field": "nope", "below": 1}], "review rule 1: nope: no property 'nope'"),
        ([{"field": "law", "below": 1}], "below needs number or integer at law"),
        ([{"field": "confidence", "longer_than": 2}], "longer_than needs array or string"),
        ([{"field": "parties", "shorter_than": 1.5}], "takes a whole number of items"),
        ([{"field": "law", "missing": False}], "missing takes true"),
        ([{"field": "law", "below": 1, "above": 2}], "with one test of"),
        ([{"sample": 2}], "sample is a share of documents above 0 and at most 1"),
    ],
)
def test_a_malformed_rule_is_refused_when_the_step_is_defined(rule: Any, message: str) -> None:
    with pytest.raises(PipelineError, match="step 'read': ") as caught:
        Step(name="read", execute=lambda ctx: {}, output_schema=SCHEMA, review=rule)
    assert message in str(caught.value)


def test_unsupported_evidence_needs_a_step_that_records_evidence() -> None:
    with pytest.raises(PipelineError, match='needs an "evidence" list'):
        Step(
            name="read",
            execute=lambda ctx: {},
            output_schema={"type": "object"},
            review=["unsupported_evidence"],
        )


def test_rules_are_part_of_the_definition_and_steps_without_keep_their_hash() -> None:
    plain = Step(name="read", execute=lambda ctx: {}, output_schema=SCHEMA)
    ruled = Step(name="read", execute=plain.execute, output_schema=SCHEMA, review="always")
    assert "review" not in plain.definition()
    assert ruled.definition()["review"] == ["always"]
    assert Pipeline("p", 1, (plain,)).definition_hash != Pipeline("p", 1, (ruled,)).definition_hash


FILE = """\
name: claims
version: 1
defaults: {model: gpt-4o-mini}
steps:
  - name: read
    kind: ask
    prompt: "{{ document }}"
    output_schema:
      type: object
      properties:
        amount: {type: number}
    review:
      - {field: amount, above: 100}
      - {field: amonut, below: 1}
"""


def test_a_files_bad_rule_names_the_file_and_the_rules_line() -> None:
    with pytest.raises(PipelineError) as caught:
        load_pipeline_file(FILE, "pipelines/claims.yaml")
    assert str(caught.value).startswith("pipelines/claims.yaml:14: step 'read': review rule 2: ")
    assert "no property 'amonut'" in str(caught.value)


def test_a_files_rules_work_as_pythons_do() -> None:
    pipeline = load_pipeline_file(FILE.replace("amonut", "amount"), "claims.yaml")
    assert [r.kind for r in pipeline.review_reasons("read", {"amount": 500}, sample_at=0.5)] == [
        "above"
    ]
    assert pipeline.review_reasons("read", {"amount": 50}, sample_at=0.5) == []
