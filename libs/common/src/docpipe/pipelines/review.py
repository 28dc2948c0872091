"""Rules that ask for a person: when one holds for a step's output, the run pauses after
that step in ``needs_review`` until a reviewer approves, retries or rejects it.

A step states its rules as data, the same in Python (``Step(review=...)``) and in a
pipeline file (``review:``)::

    review: always                       # every run pauses after this step
    review:
      - {field: fields.liability_cap.amount, above: 1000000}
      - {field: confidence, below: 0.8}
      - {field: fields.governing_law, missing: true}   # null, absent or empty
      - {field: fields.parties, shorter_than: 2}       # also longer_than
      - unsupported_evidence                           # a value its quote does not support
      - value_not_in_quote                             # ... only: quote found, value not in it
      - poor_extraction                                # the document could not be read
      - {sample: 0.05}                                 # 5 % of documents

``field`` is a dot path into the step's output (a number indexes a list); it must lead to
something the output schema declares, and ``above``/``below`` to a number,
``longer_than``/``shorter_than`` to a list or a string. Every rule is checked when the
pipeline loads (:func:`parse_rules` raises :class:`RuleError` naming the rule).

Sampling is decided by the document, not by chance at run time: the same document through
the same step is sampled the same way on every run (:func:`sample_point`).

Pure functions of their arguments: no database, no model.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from docpipe.pipelines.evidence import Support, support_label, unsupported_values
from docpipe.pipelines.poor_extraction import DEFAULT_POOR_EXTRACTION_SHARE, poor_extraction
from docpipe.pipelines.templates import TemplateError, lookup, parse_path, schema_at

__all__ = [
    "ALWAYS",
    "PIPELINE_RULES",
    "Reason",
    "ReviewRule",
    "RuleError",
    "parse_rules",
    "rule_reasons",
    "sample_point",
]

ALWAYS = "always"
# Rules a pipeline may set for all its steps (``review_if``); each also works on one step.
PIPELINE_RULES = frozenset({"unsupported_evidence", "value_not_in_quote", "poor_extraction"})
# The rules that read a step's evidence, and which unsupported values each asks about.
_EVIDENCE_RULES = {"unsupported_evidence": None, "value_not_in_quote": Support.VALUE_NOT_IN_QUOTE}
_BOUNDS = ("above", "below")
_LENGTHS = ("longer_than", "shorter_than")
_FIELD_TESTS = (*_BOUNDS, *_LENGTHS, "missing")


class RuleError(ValueError):
    """A review rule is malformed or names what the step's output does not have;
    ``index`` is the rule's position in the step's list (None: the list itself)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


@dataclass(frozen=True)
class Reason:
    """Why a run waits for a person: the rule's kind, and what it saw."""

    kind: str  # always | above | below | missing | longer_than | shorter_than | sample | ...
    message: str
    field: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "field": self.field, "message": self.message}


@dataclass(frozen=True)
class ReviewRule:
    """One rule: ``kind`` with its ``field`` and ``limit`` where it has them."""

    kind: str
    field: str | None = None
    limit: float | None = None

    def as_data(self) -> str | dict[str, Any]:
        """The rule as it is written (for the definition hash and for display)."""
        if self.kind in (ALWAYS, *PIPELINE_RULES):
            return self.kind
        if self.kind == "sample":
            return {"sample": self.limit}
        value: Any = True if self.kind == "missing" else self.limit
        return {"field": self.field, self.kind: value}

    def reason(self, output: Mapping[str, Any], sample_at: float) -> Reason | None:
        """The reason this rule asks for a person about ``output``, or None."""
        if self.kind == ALWAYS:
            return Reason(ALWAYS, "this step is always reviewed")
        if self.kind in _EVIDENCE_RULES:
            fields = unsupported_values({"step": output}, only=_EVIDENCE_RULES[self.kind])
            if not fields:
                return None
            listed = ", ".join(
                f"{name} ({support_label({'support': support})})" for name, support in fields
            )
            return Reason(
                self.kind, f"{len(fields)} value(s) their quote does not support: {listed}"
            )
        if self.kind == "poor_extraction":
            share = DEFAULT_POOR_EXTRACTION_SHARE if self.limit is None else self.limit
            why = poor_extraction(output, max_share=share)
            return None if why is None else Reason(self.kind, why)
        if self.kind == "sample":
            assert self.limit is not None
            if sample_at >= self.limit:
                return None
            return Reason("sample", f"sampled for review ({self.limit:.0%} of documents)")
        assert self.field is not None
        value = lookup(output, parse_path(self.field))
        return self._field_reason(value)

    def _field_reason(self, value: Any) -> Reason | None:
        f, limit = self.field, self.limit
        if self.kind == "missing":
            if value is None or value in ("", [], {}):
                return Reason("missing", f"{f} is {_shown(value)}", f)
            return None
        assert limit is not None
        if self.kind in _BOUNDS:
            if not _is_number(value):
                # A value the rule cannot judge is one a person should look at.
                return Reason(self.kind, f"{f} is {_shown(value)}, not a number", f)
            if (self.kind == "above" and value > limit) or (self.kind == "below" and value < limit):
                return Reason(self.kind, f"{f} is {value:g}, {self.kind} {limit:g}", f)
            return None
        size = len(value) if isinstance(value, list | str) else 0
        if (self.kind == "longer_than" and size > limit) or (
            self.kind == "shorter_than" and size < limit
        ):
            words = "longer" if self.kind == "longer_than" else "shorter"
            return Reason(self.kind, f"{f} has {size} item(s), {words} than {limit:g}", f)
        return None


def rule_reasons(
    rules: Sequence[ReviewRule], output: Mapping[str, Any], sample_at: float
) -> list[Reason]:
    """The reasons ``rules`` give to ask a person about ``output`` (empty: none)."""
    return [r for rule in rules if (r := rule.reason(output, sample_at)) is not None]


def sample_point(document_sha256: str, pipeline: str, step: str) -> float:
    """A number in [0, 1) fixed by the document, pipeline and step: a rule sampling a share
    ``s`` picks the documents whose point is below ``s``, on every run alike."""
    digest = hashlib.sha256(f"{pipeline}\n{step}\n{document_sha256}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def parse_rules(spec: Any, output_schema: Mapping[str, Any]) -> tuple[ReviewRule, ...]:
    """The rules ``spec`` states (``"always"``, or a list of rules), checked against the
    step's ``output_schema``; RuleError naming the rule otherwise."""
    if spec is None:
        return ()
    if spec == ALWAYS:
        return (ReviewRule(ALWAYS),)
    if isinstance(spec, str) or not isinstance(spec, Sequence):
        raise RuleError(f"review must be {ALWAYS!r} or a list of rules, not {spec!r}")
    rules = []
    for index, item in enumerate(spec):
        try:
            rules.append(_rule(item, output_schema))
        except RuleError as exc:
            raise RuleError(f"review rule {index + 1}: {exc}", index) from None
    return tuple(rules)


def _rule(item: Any, output_schema: Mapping[str, Any]) -> ReviewRule:
    if isinstance(item, str):
        if item in PIPELINE_RULES:
            if item in _EVIDENCE_RULES and "evidence" not in output_schema.get("properties", {}):
                raise RuleError(
                    f'{item} needs an "evidence" list in the step\'s output '
                    "(declare evidence: in a file step)"
                )
            return ReviewRule(item)
        known = ", ".join(sorted({ALWAYS, *PIPELINE_RULES, "sample", *_FIELD_TESTS}))
        raise RuleError(f"unknown rule {item!r} (known: {known})")
    if not isinstance(item, Mapping):
        raise RuleError(f"a rule is a name or a mapping, not {item!r}")
    if set(item) == {"sample"}:
        share = item["sample"]
        if not _is_number(share) or not 0 < share <= 1:
            raise RuleError(f"sample is a share of documents above 0 and at most 1, not {share!r}")
        return ReviewRule("sample", limit=float(share))
    tests = [k for k in item if k != "field"]
    if "field" not in item or len(tests) != 1 or tests[0] not in _FIELD_TESTS:
        raise RuleError(
            f"a field rule is {{field: <path>, <test>: <value>}} with one test of "
            f"{', '.join(_FIELD_TESTS)}; got {dict(item)!r}"
        )
    test, value = tests[0], item[tests[0]]
    field = item["field"]
    target = _schema_of(field, output_schema)
    if test == "missing":
        if value is not True:
            raise RuleError(f"missing takes true, not {value!r}")
        return ReviewRule("missing", field=field)
    if not _is_number(value):
        raise RuleError(f"{test} takes a number, not {value!r}")
    if test in _LENGTHS and (value < 0 or value != int(value)):
        raise RuleError(f"{test} takes a whole number of items, not {value!r}")
    wanted = ("number", "integer") if test in _BOUNDS else ("array", "string")
    if (declared := _types(target)) and not declared & set(wanted):
        raise RuleError(
            f"{test} needs {' or '.join(wanted)} at {field}, whose schema says "
            f"{' or '.join(sorted(declared))}"
        )
    return ReviewRule(test, field=field, limit=float(value))


def _schema_of(field: Any, output_schema: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(field, str):
        raise RuleError(f"field is a dot path such as fields.total.amount, not {field!r}")
    try:
        return schema_at(output_schema, parse_path(field), where=field)
    except TemplateError as exc:
        raise RuleError(str(exc)) from None


def _types(schema: Mapping[str, Any]) -> set[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    return set(declared) if isinstance(declared, list) else set()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: Any) -> str:
    return "missing" if value is None else f"empty ({value!r})"
