"""Evaluation sets and evaluations: a set created, filled (an upload of JSON lines, reviews
promoted) and read by version; an evaluation started, followed, reported, compared and
cancelled (docpipe.state.evaluation_sets, docpipe.state.evaluations).

Blocking: an async caller runs these in a thread."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import IO

from docpipe import statuses
from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.pipelines.model import Step
from docpipe.state import batches, evaluations
from docpipe.state import evaluation_sets as sets
from docpipe.state.after_commit import AfterCommit, CreatedRuns, dispatch_after_commit
from docpipe.statuses import Lane
from docpipe_api.bodies import Refusal, Upload
from docpipe_api.evaluation_schemas import (
    CompareOut,
    EvaluationDocumentOut,
    EvaluationDocumentsOut,
    EvaluationIn,
    EvaluationOut,
    EvaluationSetIn,
    EvaluationSetOut,
    EvaluationSetsOut,
    EvaluationsOut,
    PromoteIn,
    SetItemOut,
    SetItemsOut,
)
from docpipe_api.resources import Caller, Resources
from docpipe_api.schemas import BatchStatusOut

__all__ = [
    "add_evaluation_set_items",
    "cancel_evaluation",
    "compare_evaluations",
    "create_evaluation_set",
    "evaluation_document",
    "evaluation_documents",
    "evaluation_set",
    "evaluation_set_items",
    "evaluation_sets",
    "evaluation_status",
    "evaluations_list",
    "promote_reviews",
    "start_evaluation",
]


def create_evaluation_set(
    *, resources: Resources, caller: Caller, wanted: EvaluationSetIn
) -> tuple[EvaluationSetOut, bool]:
    """A new empty set (True), or the caller's set of that name for the same pipeline and
    step (False); ConflictError if it is for another. InvalidRequestError for a pipeline
    or step the deployment does not have."""
    resources.pipelines.latest(wanted.pipeline).step(wanted.step)
    created, new = sets.create_set(
        resources.database,
        tenant_id=caller.tenant,
        name=wanted.name,
        pipeline=wanted.pipeline,
        step=wanted.step,
    )
    return EvaluationSetOut.model_validate(created), new


def evaluation_sets(*, resources: Resources, caller: Caller) -> EvaluationSetsOut:
    found = sets.list_sets(resources.database, tenant_id=caller.tenant)
    return EvaluationSetsOut(sets=[EvaluationSetOut.model_validate(s) for s in found])


def evaluation_set(*, resources: Resources, caller: Caller, set_ref: str) -> EvaluationSetOut:
    found = sets.find_set(resources.database, tenant_id=caller.tenant, ref=set_ref)
    return EvaluationSetOut.model_validate(found)


def evaluation_set_items(
    *,
    resources: Resources,
    caller: Caller,
    set_ref: str,
    version: int | None = None,
    after: str = "",
    limit: int = 100,
) -> SetItemsOut:
    """A page of the items of the set's ``version`` (default: its current one)."""
    db = resources.database
    found = sets.find_set(db, tenant_id=caller.tenant, ref=set_ref)
    at = found.version if version is None else min(version, found.version)
    items = sets.items_page(db, found.id, at, after=after, limit=limit)
    return SetItemsOut(
        set=found.name,
        version=at,
        items=[SetItemOut.model_validate(i) for i in items],
        next_after=items[-1].document_id if len(items) == limit else None,
    )


def add_evaluation_set_items(
    *,
    resources: Resources,
    caller: Caller,
    set_ref: str,
    lines: IO[bytes],
    source: str,
    files: Mapping[str, Upload | Refusal] | None = None,
) -> EvaluationSetOut:
    """The JSON lines of ``lines`` as the set's next version, read a line at a time and
    stored in chunks in one transaction (see docpipe.state.evaluation_sets.add_items).
    ``files``: the file parts sent beside them, by name, each stored as a document by the
    line naming it in that transaction; a line naming no part, a refused part, or a part
    no line names, and nothing changes."""
    settings, db = resources.settings, resources.database
    found = sets.find_set(db, tenant_id=caller.tenant, ref=set_ref)
    named: set[str] = set()

    def sent_file(where: str, part: str) -> tuple[IO[bytes], str]:
        if files is None:
            raise InvalidRequestError(
                f"{where}: document.file names a part of a multipart upload; this is none"
            )
        sent = files.get(part)
        if sent is None:
            raise InvalidRequestError(f"{where}: no file part is named {part[:100]!r}")
        if isinstance(sent, Refusal):
            raise sent.error(f"{where}: file part {part[:100]!r}")
        assert sent.file is not None  # judged_file makes no text uploads
        named.add(part)
        return sent.file, sent.format

    items = sets.parse_item_lines(
        lines,
        source=source,
        max_line_bytes=settings.max_expected_output_bytes,
        max_text_bytes=settings.max_document_bytes,
        sent_files=sent_file,
    )
    if files is not None:
        items = _every_part_named(items, files, named)
    updated = sets.add_items(
        db,
        tenant_id=caller.tenant,
        evaluation_set=found,
        step=_expected_step(resources, found),
        items=items,
        max_items=settings.max_evaluation_items,
    )
    return EvaluationSetOut.model_validate(updated)


def _every_part_named(
    items: Iterable[sets.ExpectedItem], files: Mapping[str, object], named: set[str]
) -> Iterator[sets.ExpectedItem]:
    """``items``, then InvalidRequestError (within the transaction that stores them) when a
    file part was named by no line: a file sent for nothing is a mistake in the upload."""
    yield from items
    if unnamed := sorted(files.keys() - named):
        raise InvalidRequestError(
            "file parts named by no line: " + ", ".join(repr(p[:100]) for p in unnamed[:20])
        )


def promote_reviews(
    *, resources: Resources, caller: Caller, set_ref: str, promote: PromoteIn
) -> EvaluationSetOut:
    """What a person approved in one run, or in every reviewed run of a batch, as the
    expected outputs of the set's next version."""
    db = resources.database
    found = sets.find_set(db, tenant_id=caller.tenant, ref=set_ref)
    updated = sets.promote_reviews(
        db,
        tenant_id=caller.tenant,
        evaluation_set=found,
        step=_expected_step(resources, found),
        run_id=promote.run_id,
        batch_id=promote.batch_id,
        max_items=resources.settings.max_evaluation_items,
    )
    return EvaluationSetOut.model_validate(updated)


def _expected_step(resources: Resources, evaluation_set: sets.EvaluationSet) -> Step:
    """The step a set's expected outputs are checked against: its latest version's."""
    return resources.pipelines.latest(evaluation_set.pipeline).step(evaluation_set.step)


def start_evaluation(
    *, resources: Resources, caller: Caller, wanted: EvaluationIn
) -> EvaluationOut:
    """A batch of the pipeline version over the set's current version (its runs reuse the
    caller's answers to identical requests and measure their review rules instead of
    pausing), admitted after its commit. NotFoundError for an unknown set first, then
    InvalidRequestError for an unknown pipeline, step or model."""
    settings, db = resources.settings, resources.database
    with db.transaction() as session:
        found = sets.find_set(session, tenant_id=caller.tenant, ref=wanted.set)
        pipeline = resources.pipelines.get(wanted.pipeline)
        started, created = evaluations.create_evaluation(
            session,
            tenant_id=caller.tenant,
            evaluation_set=found,
            pipeline=pipeline,
            models=wanted.models,
            known_models=frozenset(settings.provider_table.models),
            budget_usd=wanted.budget_usd,
        )
    after = AfterCommit(
        admit=True, created=CreatedRuns(pipeline.key, Lane.BATCH, count=created.runs_total)
    )
    dispatch_after_commit(db, resources.broker, settings, after)
    return _out(resources, started)


def evaluation_status(*, resources: Resources, caller: Caller, evaluation_id: str) -> EvaluationOut:
    """Its batch's progress while it runs; its report afterwards (scored the first time it
    is read after its batch ended)."""
    found = evaluations.find_evaluation(
        resources.database, tenant_id=caller.tenant, evaluation_id=evaluation_id
    )
    return _out(resources, _reported(resources, found))


def evaluations_list(*, resources: Resources, caller: Caller, limit: int = 50) -> EvaluationsOut:
    """The caller's evaluations, newest first; reports without each document's accuracy."""
    found = evaluations.list_evaluations(resources.database, tenant_id=caller.tenant, limit=limit)
    return EvaluationsOut(evaluations=[_out(resources, e, summary=True) for e in found])


def compare_evaluations(
    *,
    resources: Resources,
    caller: Caller,
    baseline: str,
    candidate: str,
    max_drop: float | None = None,
) -> CompareOut:
    """Candidate against baseline (both reported; ConflictError while one runs)."""
    db = resources.database
    a, b = (_ended(resources, caller, e) for e in (baseline, candidate))
    compared = evaluations.compare_reports(
        a,
        b,
        baseline_wrong=evaluations.wrong_values(db, a),
        candidate_wrong=evaluations.wrong_values(db, b),
        max_drop=max_drop,
    )
    return CompareOut.model_validate(compared)


def evaluation_documents(
    *, resources: Resources, caller: Caller, evaluation_id: str, after: str = "", limit: int = 100
) -> EvaluationDocumentsOut:
    found = _ended(resources, caller, evaluation_id)
    page = evaluations.evaluation_documents(resources.database, found, after=after, limit=limit)
    return EvaluationDocumentsOut(
        documents=[EvaluationDocumentOut.model_validate(d) for d in page],
        next_after=page[-1].document_id if len(page) == limit else None,
    )


def evaluation_document(
    *, resources: Resources, caller: Caller, evaluation_id: str, document_id: str
) -> EvaluationDocumentOut:
    """One document's diff of expected against got, with the evidence of what was got."""
    found = _ended(resources, caller, evaluation_id)
    document = evaluations.evaluation_document(resources.database, found, document_id)
    return EvaluationDocumentOut.model_validate(document)


def cancel_evaluation(*, resources: Resources, caller: Caller, evaluation_id: str) -> EvaluationOut:
    """No step of it that has not started will run (so no call after it); ConflictError
    once it has ended."""
    db = resources.database
    found = evaluations.find_evaluation(db, tenant_id=caller.tenant, evaluation_id=evaluation_id)
    if found.ended:
        raise ConflictError(f"evaluation {evaluation_id} has already ended")
    batches.stop_batch(
        db,
        caller.tenant,
        found.batch_id,
        status=statuses.BatchStatus.CANCELLED,
        reason="evaluation cancelled",
        broker_redis=resources.redis,
    )
    return evaluation_status(resources=resources, caller=caller, evaluation_id=evaluation_id)


def _reported(resources: Resources, evaluation: evaluations.Evaluation) -> evaluations.Evaluation:
    if not evaluation.ended or evaluation.report is not None:
        return evaluation
    return evaluations.report_evaluation(
        resources.database,
        evaluation,
        resources.pipelines.get(evaluation.pipeline),
        poor_extraction_share=resources.settings.poor_extraction_share,
    )


def _ended(resources: Resources, caller: Caller, evaluation_id: str) -> evaluations.Evaluation:
    found = evaluations.find_evaluation(
        resources.database, tenant_id=caller.tenant, evaluation_id=evaluation_id
    )
    found = _reported(resources, found)
    if found.report is None:
        raise ConflictError(f"evaluation {evaluation_id} is still running")
    return found


def _out(
    resources: Resources, evaluation: evaluations.Evaluation, *, summary: bool = False
) -> EvaluationOut:
    report = evaluation.report
    if report is not None and summary:  # a list shows the scores, not every document's
        report = {k: v for k, v in report.items() if k != "accuracy_by_document"}
    progress = None
    if report is None and not summary:
        progress = BatchStatusOut.model_validate(
            batches.batch_progress(resources.database, evaluation.tenant_id, evaluation.batch_id)
        )
    return EvaluationOut(
        id=evaluation.id,
        set=evaluation.set_name,
        set_version=evaluation.set_version,
        pipeline=evaluation.pipeline,
        step=evaluation.step,
        models=evaluation.models,
        status="reported" if report is not None else "running",
        batch=progress,
        report=report,
        created_at=evaluation.created_at,
    )
