"""Comparators, scoring, row pairing and the paired interval: the arithmetic of an
evaluation, on outputs whose right answer is known."""

from __future__ import annotations

import itertools
import random
from textwrap import dedent
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docpipe.evaluation.assignment import best_assignment
from docpipe.evaluation.comparators import ComparatorError, Leaf, field_tree, parse_overrides
from docpipe.evaluation.paired import paired_difference
from docpipe.evaluation.scoring import score_document, summarise
from docpipe.pipelines import PipelineError, Step
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.files import load_pipeline_file
from docpipe.state.evaluation_report import percentile

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "signed": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
        "amount": {"type": "number"},
        "risk": {"enum": ["low", "high"]},
        "renews": {"type": "boolean"},
        "parties": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "role": {"type": "string"}},
            },
        },
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}


def tree(overrides: dict[str, Any] | None = None) -> Any:
    return field_tree(SCHEMA, parse_overrides(overrides))


def outcomes(expected: Any, got: Any, overrides: dict[str, Any] | None = None) -> dict[str, str]:
    """Each scored value's outcome by its place in ``got`` (true negatives left out)."""
    scored = score_document(tree(overrides), expected, got)
    return {c.pointer: c.outcome for c in scored.cells if c.outcome != "absent"}


def test_defaults_come_from_the_schema_types() -> None:
    node = tree()
    leaves = {name: child for name, child in node.properties.items() if isinstance(child, Leaf)}
    assert {n: leaf.compare for n, leaf in leaves.items()} == {
        "name": "text",
        "signed": "date",
        "amount": "number",
        "risk": "exact",
        "renews": "exact",
    }


def test_strings_ignore_case_whitespace_and_quotation_marks() -> None:
    got = outcomes({"name": "Acme \u201cNorth\u201d Ltd"}, {"name": '  acme "north"\n LTD '})
    assert got["/name"] == "correct"
    assert outcomes({"name": "Acme"}, {"name": "Acme Ltd"})["/name"] == "wrong"


def test_dates_compare_whatever_their_format() -> None:
    for written in ("2024-03-05", "March 5, 2024", "5 March 2024", "5th March 2024"):
        assert outcomes({"signed": "2024-03-05"}, {"signed": written})["/signed"] == "correct"
    assert outcomes({"signed": "2024-03-05"}, {"signed": "2024-03-06"})["/signed"] == "wrong"


def test_enums_and_booleans_are_exact() -> None:
    assert outcomes({"risk": "low"}, {"risk": "low"})["/risk"] == "correct"
    assert outcomes({"risk": "low"}, {"risk": "Low"})["/risk"] == "wrong"  # no text rules
    assert outcomes({"renews": True}, {"renews": True})["/renews"] == "correct"
    assert outcomes({"renews": True}, {"renews": False})["/renews"] == "wrong"
    assert outcomes({"renews": False}, {"renews": "false"})["/renews"] == "wrong"


def test_numbers_within_their_tolerance() -> None:
    assert outcomes({"amount": 1000}, {"amount": 1000.0})["/amount"] == "correct"
    assert outcomes({"amount": 1000}, {"amount": "1,000"})["/amount"] == "correct"
    assert outcomes({"amount": 1000}, {"amount": 1001})["/amount"] == "wrong"
    loose = {"amount": {"tolerance": 2}}
    assert outcomes({"amount": 1000}, {"amount": 1001.5}, loose)["/amount"] == "correct"
    relative = {"amount": {"relative": 0.05}}
    assert outcomes({"amount": 1000}, {"amount": 1040}, relative)["/amount"] == "correct"
    assert outcomes({"amount": 1000}, {"amount": 1060}, relative)["/amount"] == "wrong"


def test_fuzzy_counts_what_is_similar_enough() -> None:
    fuzzy = {"name": {"compare": "fuzzy", "threshold": 0.8}}
    assert (
        outcomes({"name": "Acme Holdings"}, {"name": "Acme Holding"}, fuzzy)["/name"] == "correct"
    )
    assert outcomes({"name": "Acme Holdings"}, {"name": "Zenith"}, fuzzy)["/name"] == "wrong"


def test_each_outcome_and_the_measures_it_gives() -> None:
    scored = score_document(
        tree(),
        {"name": "A", "amount": 5, "risk": "low", "renews": None},
        {"name": "A", "amount": 6, "signed": "2024-01-01", "renews": None},
    )
    by_field = {c.path: c.outcome for c in scored.cells}
    assert by_field == {
        "name": "correct",
        "signed": "extra",
        "amount": "wrong",
        "risk": "missing",
        "renews": "absent",
    }
    t = scored.totals
    assert (t.correct, t.wrong, t.missing, t.extra, t.absent) == (1, 1, 1, 1, 1)
    assert t.precision == pytest.approx(1 / 3)  # correct / (correct + wrong + extra)
    assert t.recall == pytest.approx(1 / 3)  # correct / (correct + wrong + missing)
    assert t.f1 == pytest.approx(1 / 3)
    assert t.accuracy == pytest.approx(2 / 5)  # (correct + absent) / all


def test_rows_are_paired_by_best_assignment_before_cells_are_compared() -> None:
    expected = {
        "parties": [{"name": "Acme", "role": "Supplier"}, {"name": "Beta", "role": "Buyer"}]
    }
    # Reordered, one role wrong: the pairing follows the names, so one cell is wrong.
    got = {"parties": [{"name": "Beta", "role": "Seller"}, {"name": "Acme", "role": "Supplier"}]}
    found = outcomes(expected, got)
    assert sorted(found.values()) == ["correct", "correct", "correct", "wrong"]
    assert found["/parties/0/role"] == "wrong"  # where the step put Beta
    # A row too many is extra, a row too few is missing.
    more = outcomes(expected, {"parties": [*got["parties"], {"name": "Gamma", "role": "X"}]})
    assert sorted(v for k, v in more.items() if k.startswith("/parties/2")) == ["extra", "extra"]
    fewer = outcomes(expected, {"parties": got["parties"][1:]})
    assert sorted(fewer.values()) == ["correct", "correct", "missing", "missing"]


def test_a_key_pairs_rows_by_that_field() -> None:
    expected = {
        "parties": [{"name": "Acme", "role": "Buyer"}, {"name": "Beta", "role": "Supplier"}]
    }
    got = {"parties": [{"name": "Beta", "role": "Buyer"}, {"name": "Acme", "role": "Supplier"}]}
    # By best assignment, rows would pair by role (two cells right either way); by name, the
    # roles are both wrong.
    by_name = outcomes(expected, got, {"parties": {"key": "name"}})
    assert sorted(by_name.values()) == ["correct", "correct", "wrong", "wrong"]


def test_lists_of_plain_values_pair_too() -> None:
    found = outcomes({"notes": ["b", "a", "c"]}, {"notes": ["a", "b", "d"]})
    assert sorted(found.values()) == ["correct", "correct", "wrong"]


def test_weights_and_fields_not_scored() -> None:
    scored = score_document(
        tree({"name": {"weight": 3}, "amount": "none"}),
        {"name": "A", "amount": 1, "risk": "low"},
        {"name": "A", "amount": 2, "risk": "high"},
    )
    assert {c.path for c in scored.cells} >= {"name", "risk"}
    assert "amount" not in {c.path for c in scored.cells}
    assert scored.totals.correct == 3 and scored.totals.wrong == 1


def test_summaries_per_field_and_overall() -> None:
    docs = [
        score_document(tree(), {"name": "A", "amount": 1}, {"name": "A", "amount": 1}),
        score_document(tree(), {"name": "B", "amount": 2}, {"name": "X", "amount": 2}),
    ]
    overall, fields = summarise(docs)
    accuracy = {f.path: f.totals.accuracy for f in fields}
    assert accuracy["name"] == 0.5 and accuracy["amount"] == 1.0
    assert overall.correct == 3 and overall.wrong == 1


def test_evidence_scores_the_share_of_correct_values_whose_quote_is_supported() -> None:
    evidence = [
        {"path": "/name", "supported": True},
        {"path": "/parties", "supported": False},
    ]
    scored = score_document(
        tree(),
        {"name": "A", "amount": 1, "parties": [{"name": "P", "role": "R"}]},
        {"name": "A", "amount": 1, "parties": [{"name": "P", "role": "R"}]},
        evidence,
    )
    # name: supported; both party cells: covered, not supported; amount: no record.
    assert scored.totals.evidenced == 3 and scored.totals.supported == 1
    assert scored.totals.evidence == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"fields.nope": {"weight": 2}},
            "compare fields.nope: the output schema declares no such field",
        ),
        ({"name": {"compare": "number"}}, "compare name: number does not fit a string"),
        ({"amount": {"threshold": 0.5}}, "compare amount: threshold does not apply"),
        ({"name": {"key": "x"}}, "compare name: key pairs the rows of a list"),
        ({"parties": {"key": "email"}}, "compare parties: key 'email' is not a field of its rows"),
        ({"name": {"compare": "closest"}}, "compare name: unknown comparator 'closest'"),
        ({"name": {"tolerance": -1}}, "compare name: tolerance must be a number >= 0"),
        ({"name": {"colour": 1}}, "compare name: unknown option 'colour'"),
    ],
)
def test_overrides_that_do_not_fit_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ComparatorError) as refused:
        tree(overrides)
    assert str(refused.value).startswith(message)


def test_a_python_step_checks_its_overrides_when_defined() -> None:
    with pytest.raises(PipelineError, match=r"step 'x': compare colour: the output schema"):
        Step(name="x", execute=lambda _: {}, output_schema=SCHEMA, compare={"colour": "text"})


def test_a_pipeline_file_names_the_line_of_a_wrong_override() -> None:
    text = dedent(
        """\
        name: scored
        version: 1
        defaults: {model: gpt-4o-mini}
        steps:
          - name: read
            kind: ask
            prompt: "{{ document }}"
            output_schema:
              type: object
              properties: {total: {type: number}, name: {type: string}}
            compare:
              total: {tolerance: 0.5}
              name: {compare: number}
        """
    )
    with pytest.raises(PipelineError) as refused:
        load_pipeline_file(text, "pipelines/scored.yaml")
    assert str(refused.value) == (
        "pipelines/scored.yaml:13: step 'read': compare name: number does not fit a string "
        "(fitting: date, exact, fuzzy, none, text)"
    )
    undeclared = text.replace("name: {compare: number}", "fields.name: {weight: 2}")
    with pytest.raises(PipelineError) as refused:
        load_pipeline_file(undeclared, "pipelines/scored.yaml")
    assert str(refused.value) == (
        "pipelines/scored.yaml:13: step 'read': compare fields.name: the output schema "
        "declares no such field"
    )
    fine = load_pipeline_file(text.replace("name: {compare: number}", "name: fuzzy"), "ok.yaml")
    total = fine.step("read").comparison.properties["total"]  # type: ignore[union-attr]
    assert isinstance(total, Leaf) and total.tolerance == 0.5


def test_document_extract_scores_fields_not_its_bookkeeping() -> None:
    fields = DOCUMENT_EXTRACT.step("extract_fields")
    expected = {"fields": {"governing_law": "Delaware", "term_months": 12}}
    got = {
        "fields": {"governing_law": "delaware", "term_months": 12},
        "found_in": {"governing_law": "9"},
        "evidence": [{"path": "/fields/governing_law", "supported": True}],
    }
    scored = score_document(fields.comparison, expected, got, got["evidence"])
    assert {c.path for c in scored.cells if c.outcome != "absent"} == {
        "fields.governing_law",
        "fields.term_months",
    }
    # term_months has no record: only governing_law counts, and its quote is supported.
    assert scored.accuracy == 1.0 and scored.totals.evidenced == 1 and scored.totals.evidence == 1.0


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 6).flatmap(
        lambda rows: st.integers(0, 6).flatmap(
            lambda columns: st.lists(
                st.lists(st.integers(0, 9), min_size=columns, max_size=columns),
                min_size=rows,
                max_size=rows,
            )
        )
    )
)
def test_the_assignment_is_the_best_of_all(gain: list[list[int]]) -> None:
    pairs = best_assignment(gain)
    rows, columns = len(gain), len(gain[0]) if gain else 0
    assert len(pairs) == min(rows, columns) if columns else pairs == []
    assert len({r for r, _ in pairs}) == len(pairs) == len({c for _, c in pairs})
    if not pairs:
        return
    if rows <= columns:  # every row paired: try every choice of distinct columns
        choices = itertools.permutations(range(columns), rows)
        best = max(sum(gain[r][c] for r, c in enumerate(chosen)) for chosen in choices)
    else:
        choices = itertools.permutations(range(rows), columns)
        best = max(sum(gain[r][c] for c, r in enumerate(chosen)) for chosen in choices)
    assert sum(gain[r][c] for r, c in pairs) == best


def test_one_flip_in_twenty_is_noise_and_a_broad_drop_is_not() -> None:
    a = [1.0] * 20
    one_flip = paired_difference(a, [1.0] * 19 + [0.0])
    assert one_flip.mean == pytest.approx(-0.05)
    assert one_flip.high == 0.0 and not one_flip.regression(0.02)
    rng = random.Random(3)
    worse = [1.0 - rng.choice((0.1, 0.2, 0.3)) for _ in range(20)]
    drop = paired_difference(a, worse)
    assert drop.high < 0 and drop.regression(0.02)
    assert not paired_difference(a, a).regression(0.0)
    # The pairing matters: documents that differ a lot from each other but not between the
    # two versions give a tight interval.
    spread = [rng.random() for _ in range(30)]
    same_but_one = [*spread[:-1], spread[-1] - 0.01]
    tight = paired_difference(spread, same_but_one)
    assert tight.low > -0.01 and tight.high <= 0.0
    assert paired_difference(a, worse) == paired_difference(a, worse), "seeded: repeatable"


def test_a_large_set_gets_the_normal_interval_a_bootstrap_would_draw() -> None:
    rng = random.Random(9)
    a = [rng.random() for _ in range(1500)]
    b = [x - rng.choice((0.0, 0.0, 0.05)) for x in a]
    normal = paired_difference(a, b)
    drawn = paired_difference(a[:999], b[:999])  # below the threshold: resampled
    assert normal.low < normal.mean < normal.high < 0
    assert abs((normal.high - normal.low) - (drawn.high - drawn.low) * (999 / 1500) ** 0.5) < 0.002


@pytest.mark.parametrize(
    ("values", "share", "expected"),
    [
        ([1, 2], 0.5, 1),  # half of the values are at or below 1
        (list(range(1, 103)), 0.5, 51),
        (list(range(1, 21)), 0.95, 19),
        (list(range(1, 21)), 0.951, 20),
        ([7], 0.95, 7),
        ([3, 1, 2], 0.0, 1),
        ([3, 1, 2], 1.0, 3),
        ([], 0.5, None),
    ],
)
def test_a_reports_percentiles_are_nearest_rank(
    values: list[int], share: float, expected: int | None
) -> None:
    assert percentile(values, share) == expected
