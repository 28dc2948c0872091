"""Evaluations: a pipeline version run over an evaluation set's version as one batch, then
scored against the expected outputs.

An evaluation is a batch like any other (admitted fairly, within its budget, cancellable,
followed in one request), whose runs reuse the answers the tenant already has for identical
requests and measure their review rules instead of pausing for a person. Once the batch has
ended, the first read of the evaluation scores it (docpipe.state.evaluation_report) and
keeps the report; its documents are kept one row each, read a page at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe.evaluation.paired import paired_difference
from docpipe.pipelines.model import Pipeline
from docpipe.state import batches
from docpipe.state.db import Database, Session
from docpipe.state.evaluation_report import ReportBuilder, RunRow
from docpipe.state.evaluation_sets import EvaluationSet, set_items
from docpipe.statuses import BatchStatus

__all__ = [
    "Evaluation",
    "EvaluationDocument",
    "compare_reports",
    "create_evaluation",
    "evaluation_documents",
    "find_evaluation",
    "list_evaluations",
    "report_evaluation",
    "wrong_values",
]

_FIRST_UUID = "00000000-0000-0000-0000-000000000000"
_RUNS_PAGE = 500


@dataclass(frozen=True)
class Evaluation:
    id: str
    tenant_id: str
    set_id: str
    set_name: str
    set_version: int
    pipeline: str
    step: str
    batch_id: str
    models: dict[str, str]
    report: dict[str, Any] | None
    reported_at: datetime | None
    created_at: datetime
    batch_status: str

    @property
    def ended(self) -> bool:
        return self.batch_status != BatchStatus.RUNNING


@dataclass(frozen=True)
class EvaluationDocument:
    document_id: str
    run_id: str | None
    status: str
    accuracy: float
    wrong: list[dict[str, Any]] = field(default_factory=list)
    paused_by: list[str] = field(default_factory=list)


def create_evaluation(
    session: Session,
    *,
    tenant_id: str,
    evaluation_set: EvaluationSet,
    pipeline: Pipeline,
    models: Mapping[str, str],
    known_models: frozenset[str] | set[str],
    budget_usd: Decimal | None = None,
    traceparent: str | None = None,
) -> tuple[Evaluation, batches.CreatedBatch]:
    """Start evaluating ``pipeline`` on the set's current version, in the caller's
    transaction (admission follows its commit). ``models``: a model for every step that
    asks one (``"*"``) or per step, among ``known_models``; InvalidRequestError otherwise."""
    if pipeline.name != evaluation_set.pipeline:
        raise ConflictError(
            f"evaluation set {evaluation_set.name!r} is for {evaluation_set.pipeline}, "
            f"not {pipeline.name}"
        )
    pipeline.step(evaluation_set.step)  # InvalidRequestError naming the steps it has
    asking = [s.name for s in pipeline.steps if s.model is not None]
    for step, model in models.items():
        if step != "*" and step not in asking:
            raise InvalidRequestError(
                f"models: {pipeline.key} has no step {step!r} that asks a model "
                f"(steps: {', '.join(asking)}; or '*' for all)"
            )
        if model not in known_models:
            raise InvalidRequestError(
                f"models: {model!r} is on no provider of this deployment "
                f"(known: {', '.join(sorted(known_models))})"
            )
    if evaluation_set.items == 0:
        raise ConflictError(f"evaluation set {evaluation_set.name!r} has no items")
    evaluation_id = str(uuid.uuid4())
    documents = [
        batches.BatchDocument(item.document_id)
        for item in set_items(session, evaluation_set.id, evaluation_set.version)
    ]
    created = batches.create_batch(
        session,
        tenant_id=tenant_id,
        pipeline=pipeline,
        documents=documents,
        idempotency_key=f"evaluation:{evaluation_id}",
        request={"evaluation": evaluation_id},
        budget_usd=budget_usd,
        traceparent=traceparent,
    )
    session.execute(
        "mark_evaluation_runs",
        batch_id=created.batch_id,
        models=Jsonb(dict(models)),
        steps=asking,
    )
    session.execute(
        "create_evaluation",
        id=evaluation_id,
        tenant_id=tenant_id,
        set_id=evaluation_set.id,
        set_version=evaluation_set.version,
        pipeline=pipeline.key,
        step=evaluation_set.step,
        batch_id=created.batch_id,
        models=Jsonb(dict(models)),
    )
    found = session.one_as(Evaluation, "evaluation", id=evaluation_id, tenant_id=tenant_id)
    assert found is not None
    return found, created


def find_evaluation(db: Database | Session, *, tenant_id: str, evaluation_id: str) -> Evaluation:
    """The tenant's evaluation; NotFoundError otherwise (another tenant's is not found)."""
    found = None
    if _is_uuid(evaluation_id):
        found = db.one_as(Evaluation, "evaluation", id=evaluation_id, tenant_id=tenant_id)
    if found is None:
        raise NotFoundError(f"evaluation {evaluation_id[:100]!r} not found")
    return found


def list_evaluations(db: Database, *, tenant_id: str, limit: int = 200) -> list[Evaluation]:
    return db.all_as(Evaluation, "evaluations", tenant_id=tenant_id, limit=limit)


def report_evaluation(
    db: Database,
    evaluation: Evaluation,
    pipeline: Pipeline,
    *,
    poor_extraction_share: float,
) -> Evaluation:
    """The evaluation with its report: scored now if its batch has ended and no report is
    kept yet (a second scorer at the same time writes nothing), as it is otherwise."""
    if evaluation.report is not None or not evaluation.ended:
        return evaluation
    expected = {
        item.document_id: item.expected
        for item in set_items(db, evaluation.set_id, evaluation.set_version)
    }
    builder = ReportBuilder(pipeline, evaluation.step, expected, poor_extraction_share)
    with db.transaction() as session:
        for page in _runs(session, evaluation.batch_id):
            for run in page:
                builder.add(run)
            session.execute(
                "save_evaluation_documents",
                evaluation_id=evaluation.id,
                documents=Jsonb(builder.documents),
            )
            builder.documents.clear()
        report = {
            "evaluation_id": evaluation.id,
            "set": evaluation.set_name,
            "set_version": evaluation.set_version,
            "pipeline": evaluation.pipeline,
            "step": evaluation.step,
            "models": evaluation.models,
            **builder.report(),
        }
        session.execute("save_evaluation_report", id=evaluation.id, report=Jsonb(report))
    return find_evaluation(db, tenant_id=evaluation.tenant_id, evaluation_id=evaluation.id)


def wrong_values(db: Database, evaluation: Evaluation) -> dict[str, set[str]]:
    """Each document's values that came out wrong, missing or extra (JSON pointers)."""
    wrong: dict[str, set[str]] = {}
    after = ""
    while page := evaluation_documents(db, evaluation, after=after, limit=1000):
        for document in page:
            wrong[document.document_id] = {c["pointer"] for c in document.wrong}
        after = page[-1].document_id
    return wrong


def _runs(session: Session, batch_id: str) -> Iterator[list[RunRow]]:
    after = _FIRST_UUID
    while True:
        rows = session.all_as(
            RunRow, "evaluation_runs", batch_id=batch_id, after=after, limit=_RUNS_PAGE
        )
        if rows:
            yield rows
        if len(rows) < _RUNS_PAGE:
            return
        after = rows[-1].run_id


def evaluation_documents(
    db: Database, evaluation: Evaluation, *, after: str = "", limit: int = 100
) -> list[EvaluationDocument]:
    """A reported evaluation's documents by id, a page after ``after``."""
    return db.all_as(
        EvaluationDocument,
        "evaluation_documents",
        evaluation_id=evaluation.id,
        after=after,
        limit=limit,
    )


def evaluation_document(
    db: Database, evaluation: Evaluation, document_id: str
) -> EvaluationDocument:
    found = db.one_as(
        EvaluationDocument,
        "evaluation_document",
        evaluation_id=evaluation.id,
        document_id=document_id,
    )
    if found is None:
        raise NotFoundError(f"document {document_id[:100]!r} is not in evaluation {evaluation.id}")
    return found


def compare_reports(
    baseline: Evaluation,
    candidate: Evaluation,
    *,
    baseline_wrong: Mapping[str, set[str]],
    candidate_wrong: Mapping[str, set[str]],
    max_drop: float | None = None,
) -> dict[str, Any]:
    """Candidate against baseline on the documents both scored: per-field deltas, the
    accuracy difference with its paired 95 % interval, the values that flipped (right to
    wrong, wrong to right; ``*_wrong``: each document's wrong cells as ``pointer``), the cost
    delta, and with ``max_drop`` whether the candidate is worse beyond noise."""
    a, b = baseline.report, candidate.report
    if a is None or b is None:
        raise InvalidRequestError("both evaluations must have ended and been reported")
    if baseline.step != candidate.step:
        raise InvalidRequestError(
            f"the evaluations score different steps ({baseline.step}, {candidate.step})"
        )
    by_a, by_b = a["accuracy_by_document"], b["accuracy_by_document"]
    shared = sorted(set(by_a) & set(by_b))
    difference = paired_difference([by_a[d] for d in shared], [by_b[d] for d in shared])
    fields_a = {f["path"]: f for f in a["fields"]}
    fields = [
        {
            "path": f["path"],
            "baseline": fields_a.get(f["path"], {}).get("accuracy"),
            "candidate": f["accuracy"],
            "delta": _delta(fields_a.get(f["path"], {}).get("accuracy"), f["accuracy"]),
        }
        for f in b["fields"]
    ]
    worse = [
        {"document_id": d, "pointer": p}
        for d in shared
        for p in sorted(candidate_wrong.get(d, set()) - baseline_wrong.get(d, set()))
    ]
    better = [
        {"document_id": d, "pointer": p}
        for d in shared
        for p in sorted(baseline_wrong.get(d, set()) - candidate_wrong.get(d, set()))
    ]
    compared: dict[str, Any] = {
        "baseline": baseline.id,
        "candidate": candidate.id,
        "documents": len(shared),
        "accuracy": {
            "baseline": a["overall"]["accuracy"],
            "candidate": b["overall"]["accuracy"],
            "difference": difference.as_json(),
        },
        "fields": fields,
        "flipped_to_wrong": worse,
        "flipped_to_right": better,
        "cost_usd": {
            "baseline": a["cost_usd"],
            "candidate": b["cost_usd"],
            "delta": str(Decimal(b["cost_usd"]) - Decimal(a["cost_usd"])),
        },
    }
    if max_drop is not None:
        compared["gate"] = {
            "max_drop": max_drop,
            "regression": difference.regression(max_drop),
        }
    return compared


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 6)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
