"""The review queue: runs paused in ``needs_review`` for a person, and their decisions.

A run pauses after a step whose output a rule of its pipeline questions, or at a step that
could not succeed by itself (its output stayed outside its schema, its attempts ran out,
its definition changed). It holds the step, why, and a ``revision`` that every change to
the review raises. A decision names the revision it was made on:

- **approve**, as it is or edited (whole, or field by field): the output, checked against
  the step's schema, becomes the step's result, marked reviewed; the run goes on at the
  next step through the outbox (no earlier step runs again), or ends ``done``;
- **retry** from that step or an earlier one, optionally asking another model;
- **reject** with a reason: the run ends ``failed``.

Decisions are made under the run's row lock and recorded with a unique (run, revision):
of two reviewers deciding at once the first wins and the second is told what it decided
(:class:`StaleReviewError`). Every decision stays on record (the audit trail), and an
approval is reused when another run's same step reads the same input
(docpipe.state.runs.claim_step), so a person is never asked the same thing twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe.observability import metrics
from docpipe.pipelines.catalog import Catalog
from docpipe.pipelines.edits import (
    Edit,
    EditError,
    ReviewerQuote,
    apply_edits,
    attach_quotes,
    carry_corrections,
    field_diff,
    schema_errors,
)
from docpipe.pipelines.evidence import evidence_records
from docpipe.pipelines.model import Pipeline
from docpipe.state import runs
from docpipe.state.cursors import CURSOR_PATTERN, read_cursor, write_cursor
from docpipe.state.db import Database, Row, Session
from docpipe.state.pages import evidence_with_boxes
from docpipe.statuses import DecisionAction, Lane, RunStatus

__all__ = [
    "CURSOR_PATTERN",
    "MAX_PAGE",
    "Decided",
    "DecisionRequest",
    "ReviewDetail",
    "ReviewPage",
    "ReviewSummary",
    "Reviewer",
    "StaleReviewError",
    "decide",
    "decisions_of",
    "list_reviews",
    "review_detail",
    "uuid_or_none",
]

MAX_PAGE = 200
MAX_REASON_CHARS = 2000


class StaleReviewError(ConflictError):
    """The decision was made on a revision that is no longer the run's: ``details`` holds
    the current revision and the decisions made since (the first reviewer's, when two
    decided at once)."""


@dataclass(frozen=True)
class Reviewer:
    """Who decides: an API key (its name is looked up), or a name without keys."""

    key_id: str | None
    name: str = "anonymous"


@dataclass(frozen=True)
class DecisionRequest:
    revision: int
    action: DecisionAction
    output: dict[str, Any] | None = None  # approve: the whole output, edited
    edits: tuple[Edit, ...] = ()  # approve: field by field (applied after ``output``)
    from_step: str | None = None  # retry: default, the step in review
    model: str | None = None  # retry: the model that step asks instead
    reason: str | None = None  # reject: required; otherwise a note
    quotes: tuple[ReviewerQuote, ...] = ()  # approve: passages a reviewer chose as support


@dataclass(frozen=True)
class Decided:
    decision_id: int
    action: str
    run_status: str
    outbox_ids: tuple[int, ...]  # publish after commit
    admit: bool  # a batch-lane run waits for admission again: admit after commit


@dataclass(frozen=True)
class ReviewSummary:
    run_id: str
    pipeline: str
    document_id: str
    batch_id: str | None
    step: str | None
    reason: str | None
    reasons: list[dict[str, Any]]
    revision: int
    waiting_since: datetime | None
    error: str | None


@dataclass(frozen=True)
class ReviewPage:
    reviews: list[ReviewSummary]
    next_cursor: str | None


@dataclass(frozen=True)
class ReviewDetail:
    """What a reviewer needs: the document and what the step read, its output and why it
    waits, the step's schema, the history, and the models a retry may ask."""

    summary: ReviewSummary
    document_format: str
    document_text: str
    page_starts: list[int]
    input: dict[str, Any]
    output: dict[str, Any] | None
    errors: list[str]
    evidence: list[dict[str, Any]]
    output_schema: Mapping[str, Any]
    history: list[dict[str, Any]]
    models: list[str]


@dataclass(frozen=True)
class QueueFilter:
    """Which of a tenant's runs awaiting review to list; None: any."""

    pipeline: str | None = None
    step: str | None = None
    reason: str | None = None
    batch_id: str | None = None


def list_reviews(
    db: Database,
    tenant_id: str,
    where: QueueFilter = QueueFilter(),
    *,
    cursor: str | None = None,
    limit: int = 50,
) -> ReviewPage:
    """The tenant's runs awaiting review (``where`` says which), oldest first, ``limit`` at
    a time after ``cursor`` (the page before's ``next_cursor``)."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequestError(f"limit must be 1-{MAX_PAGE}")
    after_since, after_id = read_cursor(cursor) if cursor else (None, None)
    rows = db.all_as(
        ReviewSummary,
        "list_reviews",
        tenant_id=tenant_id,
        pipeline=where.pipeline,
        step=where.step,
        reason=where.reason,
        batch_id=uuid_or_none(where.batch_id, "batch_id"),
        after_since=after_since,
        after_id=after_id,
        limit=limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if rows else None
    return ReviewPage(rows, _cursor(last) if more and last is not None else None)


def review_detail(
    db: Database, tenant_id: str, run_id: str, *, pipelines: Catalog, models: Collection[str]
) -> ReviewDetail:
    """The review of ``run_id``; NotFoundError for no run of this tenant, ConflictError
    when the run awaits no review."""
    with db.session() as s:
        locked = _review_row(s, tenant_id, run_id, lock=False)
        inputs = s.one("review_inputs", tenant_id=tenant_id, run_id=locked["run_id"])
        history = decisions_of(db, tenant_id, [locked["run_id"]]).get(locked["run_id"], [])
    assert inputs is not None
    pipeline = pipelines.by_key.get(locked["pipeline"])
    step = locked["step"]
    schema = pipeline.step(step).output_schema if pipeline and step in pipeline.step_names else {}
    output = locked["output"]
    errors = [e for e in (locked["error"], inputs["step_error"]) if e]
    if output is not None and schema:
        errors += [f"{e.path or '/'}: {e.message}" for e in schema_errors(output, schema)]
    records = evidence_records({step: output}) if output else []
    return ReviewDetail(
        summary=_summary(locked),
        document_format=inputs["format"],
        document_text=inputs["text"],
        page_starts=list(inputs["page_starts"]),
        input=inputs["input"],
        output=output,
        errors=list(dict.fromkeys(errors)),
        evidence=evidence_with_boxes(db, tenant_id, locked["document_id"], records),
        output_schema=schema,
        history=history,
        models=sorted(models),
    )


def decide(
    db: Database,
    tenant_id: str,
    run_id: str,
    request: DecisionRequest,
    *,
    reviewer: Reviewer,
    pipelines: Catalog,
    models: Collection[str],
) -> Decided:
    """Record the decision and carry it out, in one transaction; nothing changes when it
    is refused: StaleReviewError (409) for a revision that is no longer the run's,
    ConflictError (409) for a run that awaits no review, InvalidRequestError (422) for an
    edit that breaks the step's schema (``details["errors"]``, per field), an unknown model
    or step, a reject without a reason."""
    progress = runs.run_progress(db, tenant_id, run_id, with_output=False)  # 404 first
    with db.transaction() as tx:
        review = _review_row(tx, tenant_id, progress.run_id, lock=True, revision=request.revision)
        pipeline = pipelines.get(review["pipeline"])
        reviewer = _named(tx, reviewer)
        if request.action == DecisionAction.APPROVE:
            decided = _approve(tx, review, request, reviewer, pipeline)
        elif request.action == DecisionAction.RETRY:
            decided = _retry(tx, review, request, reviewer, progress, pipelines, pipeline, models)
        else:
            decided = _reject(tx, review, request, reviewer)
    metrics.count_review_decision(progress.pipeline, decided.action)  # once committed
    return decided


def decisions_of(
    db: Database, tenant_id: str, run_ids: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """Each run's decisions, oldest first (the audit trail)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for row in db.all("decisions_of_runs", tenant_id=tenant_id, run_ids=list(run_ids)):
        found.setdefault(row.pop("run_id"), []).append(row)
    return found


def _review_row(
    session: Session, tenant_id: str, run_id: str, *, lock: bool, revision: int | None = None
) -> Row:
    params = {"tenant_id": tenant_id, "run_id": uuid_or_none(run_id, "run_id")}
    if lock:
        session.one("lock_review", **params)
    row = session.one("review_row", **params)
    if row is None:
        raise NotFoundError(f"run {run_id[:100]!r} does not exist")
    if revision is not None and (
        row["status"] != RunStatus.NEEDS_REVIEW or row["revision"] != revision
    ):
        since = session.all("decisions_since", run_id=row["run_id"], revision=revision)
        if since or row["status"] == RunStatus.NEEDS_REVIEW:
            raise _stale(row, revision, since)
    if row["status"] != RunStatus.NEEDS_REVIEW:
        raise ConflictError(f"run {row['run_id']} is {row['status']}; it awaits no review")
    return row


def _stale(row: Row, revision: int, since: list[Row]) -> StaleReviewError:
    what = "the review changed since"
    if since:
        first = since[0]
        what = f"{first['reviewer_name']} decided {first['action']} at {first['decided_at']:%c}"
    return StaleReviewError(
        f"run {row['run_id']}'s review is at revision {row['revision']}, not {revision}: "
        f"{what}; look again and decide on the current revision",
        details={
            "current_revision": row["revision"],
            "run_status": row["status"],
            "decisions_since": since,
        },
    )


def _approve(
    tx: Session, review: Row, request: DecisionRequest, reviewer: Reviewer, pipeline: Pipeline
) -> Decided:
    if pipeline.definition_hash != review["pipeline_hash"]:
        raise ConflictError(
            f"run {review['run_id']}'s pipeline {pipeline.key} changed since the run started; "
            "its output cannot be approved against the new definition: retry it instead"
        )
    step = review["step"]
    before = review["output"]
    base = request.output if request.output is not None else before
    if base is None:
        raise InvalidRequestError(
            f"step {step} has no output to approve as it is; send the whole output "
            "(output) or retry the step"
        )
    try:
        after = apply_edits(base, request.edits)
    except EditError as exc:
        where = {"errors": [e.as_json() for e in exc.errors]}
        raise InvalidRequestError(f"the edits do not apply: {exc}", details=where) from None
    after = carry_corrections(before or {}, after, reviewer=reviewer.name)
    if request.quotes:
        after = _with_quotes(tx, review, after, request.quotes, reviewer)
    if errors := schema_errors(after, pipeline.step(step).output_schema):
        raise InvalidRequestError(
            f"the approved output breaks step {step}'s schema: "
            + "; ".join(f"{e.path or '/'}: {e.message}" for e in errors[:5]),
            details={"errors": [e.as_json() for e in errors]},
        )
    decision = _record(tx, review, request, reviewer, before=before, after=after)["id"]
    next_step = pipeline.next_step(step)
    if next_step is not None:
        runs.check_batch_goes_on(tx, review["run_id"], review["batch_id"])
    resumed = tx.one(
        "approve_review",
        run_id=review["run_id"],
        step=step,
        output=Jsonb(after),
        decision_id=decision,
        next_step=next_step,
    )
    assert resumed is not None, "the row is locked and awaits review"
    interactive = review["lane"] == Lane.INTERACTIVE
    outbox = runs.enqueue_step(tx, review["run_id"], next_step) if next_step and interactive else ()
    return Decided(
        decision,
        DecisionAction.APPROVE,
        resumed["status"],
        outbox,
        admit=next_step is not None and not interactive,
    )


def _with_quotes(
    tx: Session,
    review: Row,
    after: dict[str, Any],
    quotes: Sequence[ReviewerQuote],
    reviewer: Reviewer,
) -> dict[str, Any]:
    """``after`` with the reviewer's own quotes as its values' support (checked against the
    document's text); InvalidRequestError per quote that cannot be one."""
    document = tx.one("review_document", tenant_id=review["tenant_id"], run_id=review["run_id"])
    assert document is not None, "the run is locked, and its document with it"
    try:
        return attach_quotes(
            after,
            quotes,
            document=document["text"],
            page_starts=list(document["page_starts"]),
            reviewer=reviewer.name,
        )
    except EditError as exc:
        where = {"errors": [e.as_json() for e in exc.errors]}
        raise InvalidRequestError(f"the quotes do not apply: {exc}", details=where) from None


def _retry(
    tx: Session,
    review: Row,
    request: DecisionRequest,
    reviewer: Reviewer,
    progress: runs.Progress,
    pipelines: Catalog,
    pipeline: Pipeline,
    models: Collection[str],
) -> Decided:
    from_step = request.from_step or review["step"]
    # Well-formed, but the run says no (as for POST /runs/{id}/retry): a step its pipeline
    # lacks, or one after the step in review.
    if from_step not in pipeline.step_names:
        raise ConflictError(
            f"pipeline {pipeline.key} has no step {from_step!r} "
            f"(steps: {', '.join(pipeline.step_names)})"
        )
    if pipeline.index_of(from_step) > pipeline.index_of(review["step"]):
        raise ConflictError(
            f"a retry starts at the step in review ({review['step']}) or an earlier one, "
            f"not at {from_step}"
        )
    if request.model is not None and request.model not in models:
        raise InvalidRequestError(
            f"unknown model {request.model!r}: this deployment knows {', '.join(sorted(models))}"
        )
    decision = _record(tx, review, request, reviewer, retry_from=from_step)["id"]
    outbox = runs.reopen_run(tx, progress, from_step, pipelines=pipelines, model=request.model)
    return Decided(
        decision, DecisionAction.RETRY, RunStatus.QUEUED, outbox, admit=review["lane"] == Lane.BATCH
    )


def _reject(tx: Session, review: Row, request: DecisionRequest, reviewer: Reviewer) -> Decided:
    reason = (request.reason or "").strip()
    if not reason:
        raise InvalidRequestError("a rejection needs a reason (reason)")
    decision = _record(tx, review, request, reviewer)
    error = f"rejected by {decision['reviewer_name']} at step {review['step']}: {reason}"
    tx.one("reject_review", run_id=review["run_id"], error=error[:MAX_REASON_CHARS])
    return Decided(decision["id"], DecisionAction.REJECT, RunStatus.FAILED, (), admit=False)


def _record(
    tx: Session,
    review: Row,
    request: DecisionRequest,
    reviewer: Reviewer,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    retry_from: str | None = None,
) -> Row:
    """The decision on record (its id and reviewer's name), with its per-field diff (the
    evidence docpipe carries along with a corrected value is not a change of its own)."""
    if request.reason is not None and len(request.reason) > MAX_REASON_CHARS:
        raise InvalidRequestError(f"reason: at most {MAX_REASON_CHARS} characters")
    diff = [] if after is None else field_diff(_fields(before or {}), _fields(after))
    row = tx.one(
        "record_decision",
        run_id=review["run_id"],
        tenant_id=review["tenant_id"],
        step=review["step"],
        revision=review["revision"],
        action=str(request.action),
        key_id=reviewer.key_id,
        reviewer_name=reviewer.name,
        reason=request.reason,
        output_before=None if before is None else Jsonb(before),
        output_after=None if after is None else Jsonb(after),
        edits=Jsonb([e.as_json() for e in request.edits]),
        diff=Jsonb(diff),
        retry_from=retry_from,
        retry_model=request.model,
        pipeline_hash=review["pipeline_hash"],
        input_hash=review["input_hash"],
    )
    assert row is not None
    return row


def _named(tx: Session, reviewer: Reviewer) -> Reviewer:
    """``reviewer`` under the name its decisions and corrections are recorded with."""
    row = tx.one("reviewer_name", key_id=reviewer.key_id, fallback_name=reviewer.name)
    assert row is not None
    return Reviewer(reviewer.key_id, str(row["name"]))


def _fields(output: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in output.items() if k != "evidence"}


def _summary(row: Row) -> ReviewSummary:
    fields: dict[str, Any] = {name: row[name] for name in ReviewSummary.__dataclass_fields__}
    return ReviewSummary(**fields)


def _cursor(last: ReviewSummary) -> str:
    assert last.waiting_since is not None
    return write_cursor(last.waiting_since, last.run_id)


def uuid_or_none(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        if name == "run_id":
            raise NotFoundError(f"run {value[:100]!r} does not exist") from None
        raise InvalidRequestError(f"{name}: not an id ({value[:100]!r})") from None
