"""The transitions of a pipeline run and its steps. Workers, the API and beat only ever
call these (and those of docpipe.state.batches, .admission and .recovery).

Run:   queued -> running -> done | failed | needs_review | cancelled | expired | budget_exceeded
                         (an ended run can be reopened at any step by ``restart_run``; a
                          run paused in needs_review goes on by docpipe.state.reviews)
Step:  pending -> running (leased) -> done | failed | cancelled
               <- released (transient error) / lease expired (dead worker)

Each transition is one guarded statement; when it matches no row the caller lost a race
(another worker, a cancel) and is told so by a ``None``/``False`` result, not an exception.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg.errors
from psycopg.types.json import Jsonb

from docpipe.broker.messages import Message
from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe.pipelines.catalog import Catalog
from docpipe.pipelines.evidence import evidence_records
from docpipe.pipelines.model import Pipeline
from docpipe.pipelines.review import Reason
from docpipe.pipelines.text_extraction import EXTRACT_TEXT_STEP
from docpipe.state.db import Database, Session
from docpipe.state.outbox import LANE_QUEUES_PARAM, messages_of
from docpipe.statuses import (
    ENDED_RUN_STATUSES,
    BatchStatus,
    Lane,
    Priority,
    RunStatus,
    StepStatus,
)

__all__ = [
    "Claim",
    "CreatedRun",
    "Progress",
    "StepRow",
    "StepState",
    "cancel_run",
    "check_batch_goes_on",
    "claim_step",
    "create_run",
    "enqueue_step",
    "expire_run",
    "fail_run",
    "give_up_lease",
    "inline_step_version",
    "record_step_result",
    "release_step",
    "renew_leases",
    "reopen_run",
    "request_hash",
    "restart_run",
    "run_progress",
    "runs_progress",
]


def request_hash(request: Mapping[str, Any]) -> str:
    """A stable fingerprint of what was asked, to tell a retry from a different request."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class CreatedRun:
    run_id: str
    created: bool  # False: the idempotency key named an existing run, which is returned
    outbox_ids: tuple[int, ...]  # messages to publish once the transaction has committed
    # Steps create_run did itself (extract_text of a known text: no message, claim or publish)
    steps_done_at_creation: int = 0


def create_run(
    session: Session,
    *,
    tenant_id: str,
    document_id: str,
    pipeline: Pipeline,
    lane: str,
    idempotency_key: str,
    request: Mapping[str, Any],
    batch_id: str | None = None,
    deadline_at: datetime | None = None,
    budget_usd: Decimal | None = None,
    callback_url: str | None = None,
    start_at: datetime | None = None,
    traceparent: str | None = None,
    priority: str | None = None,
    reuse_answers: bool = False,
) -> CreatedRun:
    """Create a run once per (tenant, idempotency key); the same key with another request
    is a ConflictError. Interactive runs get their first step enqueued in the same
    transaction; batch runs wait in PostgreSQL for admission. A document whose text is
    known has its extract_text step done here (see ``inline_step_version``): the first step
    enqueued is then the pipeline's own first. ``reuse_answers``: its calls take the
    tenant's earlier answers to identical requests (docpipe.providers.calls)."""
    if lane not in tuple(Lane):
        raise InvalidRequestError(f"lane must be 'interactive' or 'batch', not {lane!r}")
    fingerprint = request_hash(request)
    params = {
        "id": uuid.uuid4(),
        "tenant_id": tenant_id,
        "pipeline": pipeline.key,
        "document_id": document_id,
        "lane": lane,
        "priority": priority or Priority.default_for(lane),
        "batch_id": batch_id,
        "pipeline_hash": pipeline.definition_hash,
        "steps": pipeline.step_names,
        "budget_usd": budget_usd,
        "deadline_at": deadline_at,
        "admitted": lane == Lane.INTERACTIVE,
        "callback_url": callback_url,
        "idempotency_key": idempotency_key,
        "request_hash": fingerprint,
        "traceparent": traceparent,
        "inline_step": inline_step_version(pipeline),
        "reuse_answers": reuse_answers,
    }
    try:
        row = session.insert_or_existing("create_run", **params)
    except psycopg.errors.ForeignKeyViolation:
        # Deleted between the caller's look and this insert (docpipe.state.documents).
        raise NotFoundError(f"document {document_id!r} does not exist") from None
    run_id = str(row["id"])
    if not row["created"]:
        if row["request_hash"] != fingerprint:
            raise ConflictError(
                f"idempotency key {idempotency_key!r} was already used for a different request "
                f"(run {run_id})"
            )
        return CreatedRun(run_id, created=False, outbox_ids=())
    outbox_ids: tuple[int, ...] = ()
    if lane == Lane.INTERACTIVE:
        outbox_ids = enqueue_step(session, run_id, row["current_step"], available_at=start_at)
    return CreatedRun(
        run_id, created=True, outbox_ids=outbox_ids, steps_done_at_creation=row["steps_done"]
    )


def inline_step_version(pipeline: Pipeline) -> str | None:
    """The prompt version create_run records when it does the pipeline's first step itself:
    docpipe's own extract_text, for a document whose text is already known (else None)."""
    first = pipeline.steps[0]
    return first.prompt_version if first is EXTRACT_TEXT_STEP else None


def enqueue_step(
    session: Session, run_id: str, step: str, *, available_at: datetime | None = None
) -> tuple[int, ...]:
    """Put the message for the run's pending current step in the outbox (publish after
    commit); ``available_at`` parks it in PostgreSQL until then."""
    rows = session.all(
        "enqueue_step",
        run_id=run_id,
        step=step,
        available_at=available_at,
        queues=LANE_QUEUES_PARAM,
    )
    return tuple(r["id"] for r in rows)


@dataclass(frozen=True)
class Claim:
    run_id: str
    step: str
    attempt: int
    generation: int
    tenant_id: str
    pipeline: str
    deliveries: int  # every claim of the step, this one included (never refunded)
    worked_s: float  # what its handed-back deliveries worked
    pipeline_hash: str | None  # None: created before definitions were hashed
    document_id: str
    lane: str
    batch_id: str | None
    # What the step reads, fetched with the claim: None if the document is gone.
    document: str | None = field(default=None, repr=False)
    page_starts: list[int] = field(default_factory=lambda: [0], repr=False)
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)
    document_sha256: str | None = None
    # The hash of all the step reads (definition, document, earlier outputs), and a person's
    # approved output for the same input in another run: the step then asks no one again.
    input_hash: str | None = None
    reusable_decision_id: int | None = None
    reusable_output: dict[str, Any] | None = field(default=None, repr=False)
    model_override: str | None = None  # a reviewer's retry chose this model for the step
    # False for an evaluation's run: its review rules are measured afterwards, not acted on,
    # and no person's earlier approval stands in for what the pipeline gives.
    review_pauses: bool = True
    # When this process claimed it (time.monotonic()): what the delivery has worked so far.
    claimed_at: float = field(default_factory=time.monotonic, repr=False)

    def working_s(self) -> float:
        """Seconds since this delivery claimed the step."""
        return time.monotonic() - self.claimed_at


def claim_step(
    db: Database, run_id: str, step: str, *, owner: str, lease_s: float, session: int | None = None
) -> Claim | None:
    """Lease the step for ``owner`` (attempt + 1), or None if it is not claimable now: done,
    leased by a live worker, not the run's current step, the run has ended or is not yet
    admitted, or the step is not due yet (a retry's wait, start_at). ``session``: the key of
    the owner's lease session (docpipe.state.leases), which the lease then lasts no longer
    than; None for a lease of ``lease_s`` alone."""
    return db.one_as(
        Claim, "claim_step", run_id=run_id, step=step, owner=owner, lease_s=lease_s, session=session
    )


@dataclass(frozen=True)
class StepState:
    """Why a step could not be claimed: its own state and its run's."""

    status: str
    lease_live: bool | None
    run_status: str
    past_deadline: bool
    admitted: bool  # a batch run waiting for admission is not
    current: bool  # the run's current step
    due_in_s: float  # until the step may be claimed (0: now)


def step_state(db: Database, run_id: str, step: str, *, lease_s: float) -> StepState | None:
    return db.one_as(StepState, "step_state", run_id=run_id, step=step, lease_s=lease_s)


def renew_leases(
    db: Database,
    held: Sequence[tuple[str, str]],
    *,
    owner: str,
    lease_s: float,
    session: int | None = None,
) -> set[tuple[str, str]]:
    """The (run id, step) of ``held`` whose lease is still ours, each lasting ``lease_s``
    more and tied to ``session`` now (as in claim_step); the others were lost (taken over,
    or their run ended)."""
    if not held:
        return set()
    rows = db.all(
        "renew_leases",
        run_ids=[run_id for run_id, _ in held],
        steps=[step for _, step in held],
        owner=owner,
        lease_s=lease_s,
        session=session,
    )
    return {(row["run_id"], row["step"]) for row in rows}


def give_up_lease(db: Database, run_id: str, step: str, *, owner: str, error: str) -> bool:
    """End our lease of ``step`` now (the reaper hands the step on); False if it was not ours."""
    return db.execute("give_up_lease", run_id=run_id, step=step, owner=owner, error=error) > 0


def release_step(
    db: Database,
    run_id: str,
    step: str,
    *,
    owner: str,
    retry_in_s: float,
    error: str,
    worked_s: float,
    refund_attempt: bool = False,
    park: bool = False,
) -> bool:
    """Hand a leased step back after a transient error, to be retried in ``retry_in_s``;
    ``refund_attempt`` when the step never got to fail (it only waited for a slot, or made
    progress); ``worked_s``, what this delivery worked, adds to the step's total; ``park``:
    its next message is written to the outbox in the same statement, parked until then (the
    sweep publishes it), instead of coming back as a countdown of the current one."""
    row = db.one(
        "release_step",
        run_id=run_id,
        step=step,
        owner=owner,
        retry_in_s=retry_in_s,
        error=error[:2000],
        refund=int(refund_attempt),
        worked_s=worked_s,
        park=park,
        queues=LANE_QUEUES_PARAM,
    )
    return row is not None


@dataclass(frozen=True)
class RecordedStep:
    run_status: str
    # The next step's message, to publish after the commit (docpipe.state.outbox
    # .publish_written: its claim marks it delivered)
    messages: tuple[Message, ...]


def record_step_result(
    db: Database,
    claim: Claim,
    *,
    owner: str,
    output: dict[str, Any],
    model: str | None,
    prompt_version: str,
    next_step: str | None,
    review: Sequence[Reason] = (),
    decision_id: int | None = None,
) -> RecordedStep | None:
    """Mark the step done with its output, tokens and cost, advance the run and enqueue its
    next step, all in one statement. None if the lease was lost or the run has ended.

    After the last step the run is done. With ``review`` reasons the run pauses in
    needs_review after this step instead (nothing is enqueued). ``decision_id``: the output
    is a person's approval reused from another run."""
    row = db.one(
        "record_step_result",
        run_id=claim.run_id,
        step=claim.step,
        generation=claim.generation,
        owner=owner,
        output=Jsonb(output),
        model=model,
        prompt_version=prompt_version,
        next_step=next_step,
        review=Jsonb([r.as_json() for r in review]) if review else None,
        review_error="; ".join(f"{r.kind}: {r.message}" for r in review)[:2000] or None,
        input_hash=claim.input_hash,
        decision_id=decision_id,
        queues=LANE_QUEUES_PARAM,
    )
    if row is None:
        return None
    return RecordedStep(row["run_status"], messages_of(row["messages"]))


def fail_run(
    db: Database,
    run_id: str,
    step: str,
    *,
    owner: str | None,
    status: str,
    error: str,
    review_reason: str | None = None,
    output: dict[str, Any] | None = None,
    input_hash: str | None = None,
) -> bool:
    """End the run at ``step`` as 'failed' (permanent error) or 'budget_exceeded', or pause
    it in 'needs_review' for a person, saying what kind of ``review_reason`` (retries
    exhausted, output still invalid) and keeping the step's last ``output``, if any."""
    if status not in (RunStatus.FAILED, RunStatus.NEEDS_REVIEW, RunStatus.BUDGET_EXCEEDED):
        raise ValueError(f"not a failure status: {status}")
    if (status == RunStatus.NEEDS_REVIEW) != (review_reason is not None):
        raise ValueError("a review_reason is given exactly when the run goes to review")
    reasons = None
    if review_reason is not None:
        reasons = Jsonb([{"kind": review_reason, "field": None, "message": error[:2000]}])
    row = db.one(
        "fail_run",
        run_id=run_id,
        step=step,
        owner=owner,
        status=status,
        error=error[:2000],
        review_reason=review_reason,
        review_reasons=reasons,
        output=None if output is None else Jsonb(output),
        input_hash=input_hash,
    )
    return row is not None


def abandon_step(db: Database, run_id: str, step: str, *, owner: str) -> None:
    db.execute("abandon_step", run_id=run_id, step=step, owner=owner)


def cancel_run(db: Database, tenant_id: str, run_id: str) -> bool:
    """Stop the run; False if it had already ended (or does not exist for this tenant)."""
    with db.transaction() as tx:
        tx.all("lock_run_steps", tenant_id=tenant_id, run_id=run_id)
        return tx.one("cancel_run", tenant_id=tenant_id, run_id=run_id) is not None


def expire_run(db: Database, run_id: str) -> bool:
    """End the run as 'expired' if its deadline has passed."""
    return db.one("expire_run", run_id=run_id) is not None


def restart_run(
    db: Database, tenant_id: str, run_id: str, from_step: str | None, *, pipelines: Catalog
) -> CreatedRun:
    """Reopen an ended run at ``from_step`` (default: its first unfinished step), keeping
    and not re-paying the finished steps before it. It goes on with the definition of its
    pipeline that is loaded now, which must have the same steps, and keeps its deadline
    (ConflictError once that has passed). A batch-lane run goes through admission again,
    like a new one: no message is returned for it (the caller admits after commit)."""
    status = run_progress(db, tenant_id, run_id)
    with db.transaction() as tx:
        outbox_ids = reopen_run(tx, status, from_step, pipelines=pipelines)
    return CreatedRun(run_id, created=False, outbox_ids=outbox_ids)


def reopen_run(
    tx: Session,
    status: Progress,
    from_step: str | None,
    *,
    pipelines: Catalog,
    model: str | None = None,
) -> tuple[int, ...]:
    """``restart_run`` inside the caller's transaction, for the run ``status`` describes;
    ``model``: the model ``from_step`` asks instead of its own. The messages to publish
    after commit (none for a batch-lane run, which waits for admission)."""
    tenant_id, run_id = status.tenant_id, status.run_id
    pipeline = pipelines.get(status.pipeline)
    if [s.step for s in status.steps] != pipeline.step_names:
        raise ConflictError(
            f"run {run_id} has other steps than {pipeline.key} has now; start a new run instead"
        )
    if from_step is None:
        from_step = next(
            (s.step for s in status.steps if s.status != StepStatus.DONE), pipeline.steps[0].name
        )
    if from_step not in pipeline.step_names:
        # Well-formed, but not a step of this run's pipeline: the run, not the request, says so.
        raise ConflictError(
            f"run {run_id}'s pipeline {pipeline.key} has no step {from_step!r} "
            f"(steps: {', '.join(pipeline.step_names)})"
        )
    index = pipeline.index_of(from_step)
    reopened = tx.all(
        "restart_run",
        tenant_id=tenant_id,
        run_id=run_id,
        step=from_step,
        step_index=index,
        pipeline_hash=pipeline.definition_hash,
        model=model,
    )
    if not reopened:
        if status.status not in ENDED_RUN_STATUSES:
            raise ConflictError(f"run {run_id} is {status.status}; only ended runs restart")
        deadline = tx.one("run_deadline", run_id=run_id)
        if deadline and deadline["passed"]:
            raise ConflictError(
                f"run {run_id}'s deadline passed at {deadline['deadline_at'].isoformat()}; "
                "work after it is worth nothing to the caller: start a new run instead"
            )
        check_batch_goes_on(tx, run_id, status.batch_id)
        raise ConflictError(
            f"run {run_id} cannot restart at {from_step!r}: an earlier step is not done"
        )
    return () if status.lane == Lane.BATCH else enqueue_step(tx, run_id, from_step)


def check_batch_goes_on(session: Session, run_id: str, batch_id: str | None) -> None:
    """ConflictError when the run's batch was stopped (cancelled, over budget): its runs
    stay stopped."""
    batch = batch_id and session.one("batch_status", batch_id=batch_id)
    if batch and batch["status"] in (BatchStatus.CANCELLED, BatchStatus.BUDGET_EXCEEDED):
        raise ConflictError(
            f"run {run_id} belongs to batch {batch_id}, which is {batch['status']}; "
            "its runs stay stopped"
        )


@dataclass(frozen=True)
class StepRow:
    """A step of a run as its owner sees it."""

    step: str
    status: str
    attempt: int
    generation: int
    model: str | None
    model_choices: list[dict[str, Any]]  # [{model, reason, calls}] of this generation
    reused_calls: list[dict[str, Any]]  # [{call_id, reused_from, reused_from_run}]
    prompt_version: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: Decimal | None
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None
    reviewed: str | None  # "approved" by a person, or "reused" from an earlier approval
    output: dict[str, Any] | None  # only when asked for


@dataclass(frozen=True)
class Progress:
    """A run as its owner sees it: status, current step, steps done/total, cost so far."""

    run_id: str
    tenant_id: str
    pipeline: str
    document_id: str
    lane: str
    priority: str
    batch_id: str | None
    status: str
    current_step: str | None  # while the run is active
    steps_done: int
    steps_total: int
    cost_so_far_usd: Decimal
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    review: dict[str, Any] | None  # while it awaits a person: step, reason(s), revision
    decisions: list[dict[str, Any]]  # the audit trail of its reviews, oldest first
    webhook: dict[str, Any] | None  # its latest webhook delivery
    steps: list[StepRow] = field(default_factory=list)
    # The boxes of each value's quote on its page(s), in the order of ``values``, once
    # docpipe.state.pages.with_quote_boxes looked them up.
    quote_boxes: tuple[list[dict[str, Any]], ...] | None = None

    @property
    def result(self) -> dict[str, Any] | None:
        """The pipeline's combined output once the run is done."""
        if self.status != RunStatus.DONE:
            return None
        return {s.step: s.output for s in self.steps}

    @property
    def values(self) -> list[dict[str, Any]] | None:
        """Each extracted value with its evidence, from the outputs read with the run (None
        when no step output was read or none records evidence)."""
        outputs = {s.step: s.output for s in self.steps if s.output is not None}
        records = evidence_records(outputs)
        if self.quote_boxes is not None:
            records = [{**r, "boxes": b} for r, b in zip(records, self.quote_boxes, strict=True)]
        return records or None


def run_progress(
    db: Database,
    tenant_id: str,
    run_id: str,
    *,
    with_output: bool = False,
    outputs_of: Sequence[str] = (),
) -> Progress:
    """Status, current step, steps done/total, cost so far and per-step detail (with each
    step's output when asked for, or when the run's status is one of ``outputs_of``)."""
    found = runs_progress(db, tenant_id, [run_id], with_output=with_output, outputs_of=outputs_of)
    if not found:
        raise NotFoundError(f"run {run_id[:100]!r} does not exist")
    return found[0]


def runs_progress(
    db: Database,
    tenant_id: str,
    run_ids: Sequence[str],
    *,
    with_output: bool = False,
    outputs_of: Sequence[str] = (),
) -> list[Progress]:
    """``run_progress`` of several runs in two queries on one connection, in the order
    asked; ids that are not this tenant's runs (or not run ids at all) are left out."""
    wanted = []
    for run_id in run_ids:
        with contextlib.suppress(ValueError):
            wanted.append(str(uuid.UUID(run_id)))
    if not wanted:
        return []
    params = {"tenant_id": tenant_id, "run_ids": wanted}
    with db.session() as s:
        found = {p.run_id: p for p in s.all_as(Progress, "run_status", **params)}
        steps: dict[str, list[StepRow]] = {}
        rows = s.all(
            "run_steps", with_output=with_output, output_statuses=list(outputs_of), **params
        )
        for row in rows:
            steps.setdefault(row.pop("run_id"), []).append(StepRow(**row))
    return [
        replace(found[run_id], steps=steps.get(run_id, []))
        for run_id in dict.fromkeys(wanted)
        if run_id in found
    ]
