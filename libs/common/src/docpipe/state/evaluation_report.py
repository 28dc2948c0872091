"""An evaluation's report, built from its runs as they are read (a page at a time): the
scores per field and overall, cost, tokens and latency, and the review rules measured.

A review rule is measured on each run as if the run could pause: a rule "pauses" a run when
it holds on the output of any of its steps. Its precision is the share of the runs it
pauses that got at least one value wrong; what it misses is the wrong values of the runs it
lets through. Pure: the rows come from docpipe.state.evaluations.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from docpipe.evaluation.scoring import Cell, DocumentScore, Totals, score_document
from docpipe.pipelines.model import Pipeline
from docpipe.pipelines.review import ReviewRule, sample_point

__all__ = ["ReportBuilder", "RunRow", "percentile"]


@dataclass(frozen=True)
class RunRow:
    """What the report reads of one run of the evaluation's batch."""

    run_id: str
    document_id: str
    status: str
    error: str | None
    content_sha256: str | None
    run_s: float | None
    outputs: dict[str, Any]
    cost_usd: Decimal
    input_tokens: int
    output_tokens: int
    calls: int
    reused: int
    latencies_ms: list[int]


@dataclass
class _RuleCount:
    paused: int = 0
    paused_wrong: int = 0
    missed: float = 0.0  # wrong values in runs it let through


@dataclass
class ReportBuilder:
    """Feed it every run (``add``), then ``report()``; ``documents`` holds each document's
    row for evaluation_document as it is added (the caller writes and clears it)."""

    pipeline: Pipeline
    step: str
    expected: Mapping[str, Any]  # document id -> expected output
    poor_extraction_share: float
    overall: Totals = field(default_factory=Totals)
    by_field: dict[str, Totals] = field(default_factory=dict)
    accuracies: dict[str, float] = field(default_factory=dict)
    documents: list[dict[str, Any]] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    cost_usd: Decimal = Decimal(0)
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    reused: int = 0
    call_latencies_ms: list[int] = field(default_factory=list)
    run_seconds: list[float] = field(default_factory=list)
    rules: dict[str, _RuleCount] = field(default_factory=dict)
    paused_runs: int = 0
    missed_by_all: float = 0.0

    def __post_init__(self) -> None:
        self._tree = self.pipeline.step(self.step).comparison
        self._rules = {
            step: [
                (self._label(step, rule), rule)
                for rule in self.pipeline.rules_after(step, self.poor_extraction_share)
            ]
            for step in self.pipeline.step_names
        }
        for labelled in self._rules.values():
            for label, _ in labelled:
                self.rules.setdefault(label, _RuleCount())

    def _label(self, step: str, rule: ReviewRule) -> str:
        data = rule.as_data()
        shown = data if isinstance(data, str) else json.dumps(data, separators=(", ", ": "))
        return shown if rule.kind in self.pipeline.review_if else f"{step}: {shown}"

    def add(self, run: RunRow) -> None:
        expected = self.expected.get(run.document_id)
        if expected is None:  # not an item of the scored version (cannot happen: same batch)
            return
        got = run.outputs.get(self.step)
        evidence = got.get("evidence", []) if isinstance(got, Mapping) else []
        scored = score_document(
            self._tree, expected, got, evidence if isinstance(evidence, list) else []
        )
        self.overall.merge(scored.totals)
        for cell in scored.cells:
            self.by_field.setdefault(cell.path, Totals()).add(cell)
        self.accuracies[run.document_id] = scored.accuracy
        self.statuses[run.status] = self.statuses.get(run.status, 0) + 1
        self.cost_usd += Decimal(run.cost_usd)
        self.input_tokens += run.input_tokens
        self.output_tokens += run.output_tokens
        self.calls += run.calls
        self.reused += run.reused
        self.call_latencies_ms += run.latencies_ms
        if run.run_s is not None:
            self.run_seconds.append(run.run_s)
        paused_by = self._measure_rules(run, scored)
        wrong = scored.wrong_cells()
        self.documents.append(
            {
                "document_id": run.document_id,
                "run_id": run.run_id,
                "status": run.status,
                "accuracy": scored.accuracy,
                "wrong": [_with_quotes(c, evidence) for c in wrong],
                "paused_by": paused_by,
            }
        )

    def _measure_rules(self, run: RunRow, scored: DocumentScore) -> list[str]:
        held: set[str] = set()
        for step, labelled in self._rules.items():
            output = run.outputs.get(step)
            if not isinstance(output, Mapping):
                continue
            at = sample_point(run.content_sha256 or "", self.pipeline.key, step)
            held |= {label for label, rule in labelled if rule.reason(output, at) is not None}
        wrong = sum(c.weight for c in scored.wrong_cells())
        for label, count in self.rules.items():
            if label in held:
                count.paused += 1
                count.paused_wrong += 1 if wrong else 0
            else:
                count.missed += wrong
        if held:
            self.paused_runs += 1
        else:
            self.missed_by_all += wrong
        return sorted(held)

    def report(self) -> dict[str, Any]:
        documents = len(self.accuracies)
        return {
            "documents": documents,
            "runs_by_status": self.statuses,
            "overall": self.overall.as_json(),
            "fields": [{"path": p, **t.as_json()} for p, t in self.by_field.items()],
            "cost_usd": str(self.cost_usd),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "calls": self.calls,
            "calls_reused": self.reused,
            "call_latency_ms": {
                "p50": percentile(self.call_latencies_ms, 0.5),
                "p95": percentile(self.call_latencies_ms, 0.95),
            },
            "run_seconds": {
                "p50": percentile(self.run_seconds, 0.5),
                "p95": percentile(self.run_seconds, 0.95),
            },
            "review": {
                "paused": self.paused_runs,
                "paused_share": round(self.paused_runs / documents, 6) if documents else None,
                "missed_wrong_values": self.missed_by_all,
                "rules": [
                    {
                        "rule": label,
                        "paused": c.paused,
                        "paused_wrong": c.paused_wrong,
                        "precision": round(c.paused_wrong / c.paused, 6) if c.paused else None,
                        "missed_wrong_values": c.missed,
                    }
                    for label, c in self.rules.items()
                ],
            },
            # Each document's accuracy: what compare pairs between two evaluations.
            "accuracy_by_document": self.accuracies,
        }


def _with_quotes(cell: Cell, evidence: Sequence[Any]) -> dict[str, Any]:
    """A wrong cell, with the evidence records of what was got there (quote, page,
    whether the quote is in the document)."""
    found = [
        {k: r.get(k) for k in ("quote", "page", "section", "supported", "start", "end")}
        for r in evidence
        if isinstance(r, Mapping)
        and isinstance(r.get("path"), str)
        and (cell.pointer + "/").startswith(str(r["path"]).removesuffix("/value") + "/")
    ]
    return {**cell.as_json(), "evidence": found}


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile: the smallest value at least ``share`` of the values are
    at or below (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    # round(): share * n is a float (0.95 * 20 is 19.000000000000004), its rank an integer.
    rank = math.ceil(round(share * len(ordered), 9))
    return ordered[max(0, min(len(ordered), rank) - 1)]
