"""The transitions of a pipeline run. Celery, the API and beat only ever call these.

Run:   queued -> running -> done | failed | needs_review | cancelled | expired | budget_exceeded
                         (an ended run can be reopened at any step by ``restart_run``)
Step:  pending -> running (leased) -> done | failed | cancelled
               <- released (transient error) / lease expired (dead worker)

Each transition is one guarded statement; when it matches no row the caller lost a race
(another worker, a cancel) and is told so by a ``None``/``False`` result, not an exception.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from docpipe.db import Database, Row, Session
from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe.pipeline import Pipeline, get_pipeline

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "ENDED_RUN_STATUSES",
    "Claim",
    "CreatedRun",
    "Progress",
    "cancel_run",
    "claim_step",
    "create_run",
    "enqueue_step",
    "expire_run",
    "fail_run",
    "record_step_result",
    "release_step",
    "renew_lease",
    "request_hash",
    "restart_run",
    "run_progress",
]

ACTIVE_RUN_STATUSES = ("queued", "running")
ENDED_RUN_STATUSES = ("done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded")


def request_hash(request: Mapping[str, Any]) -> str:
    """A stable fingerprint of what was asked, to tell a retry from a different request."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class CreatedRun:
    run_id: str
    created: bool  # False: the idempotency key named an existing run, which is returned
    outbox_ids: tuple[int, ...]  # messages to publish once the transaction has committed


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
) -> CreatedRun:
    """Create a run once per (tenant, idempotency key); the same key with another request
    is a ConflictError. Interactive runs get their first step enqueued in the same
    transaction; batch runs wait in PostgreSQL for admission."""
    if lane not in ("interactive", "batch"):
        raise InvalidRequestError(f"lane must be 'interactive' or 'batch', not {lane!r}")
    fingerprint = request_hash(request)
    params = {
        "id": uuid.uuid4(),
        "tenant_id": tenant_id,
        "pipeline": pipeline.key,
        "document_id": document_id,
        "lane": lane,
        "batch_id": batch_id,
        "steps": pipeline.step_names,
        "budget_usd": budget_usd,
        "deadline_at": deadline_at,
        "admitted": lane == "interactive",
        "callback_url": callback_url,
        "idempotency_key": idempotency_key,
        "request_hash": fingerprint,
        "traceparent": traceparent,
    }
    row = _insert_or_existing(session, "create_run", params)
    run_id = str(row["id"])
    if not row["created"]:
        if row["request_hash"] != fingerprint:
            raise ConflictError(
                f"idempotency key {idempotency_key!r} was already used for a different request "
                f"(run {run_id})"
            )
        return CreatedRun(run_id, created=False, outbox_ids=())
    outbox_ids: tuple[int, ...] = ()
    if lane == "interactive":
        outbox_ids = enqueue_step(session, run_id, pipeline.steps[0].name, available_at=start_at)
    return CreatedRun(run_id, created=True, outbox_ids=outbox_ids)


def _insert_or_existing(session: Session, query: str, params: Mapping[str, Any]) -> Row:
    """Run an ``INSERT ... ON CONFLICT DO NOTHING`` query that otherwise returns the existing
    row. When a concurrent transaction inserts the same key, our INSERT waits for it and
    then does nothing, but the statement's snapshot predates that row: the second try,
    with a fresh snapshot, sees it."""
    for _ in range(2):
        if (row := session.one(query, **params)) is not None:
            return row
    raise RuntimeError(f"{query}: neither inserted nor found a row")


def enqueue_step(
    session: Session, run_id: str, step: str, *, available_at: datetime | None = None
) -> tuple[int, ...]:
    """Put the message for the run's pending current step in the outbox (publish after
    commit); ``available_at`` parks it in PostgreSQL until then."""
    rows = session.all("enqueue_step", run_id=run_id, step=step, available_at=available_at)
    return tuple(r["id"] for r in rows)


@dataclass(frozen=True)
class Claim:
    run_id: str
    step: str
    attempt: int
    generation: int
    tenant_id: str
    pipeline: str
    document_id: str
    lane: str
    batch_id: str | None
    # What the step reads, fetched with the claim: None if the document is gone.
    document: str | None = field(default=None, repr=False)
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)


def claim_step(db: Database, run_id: str, step: str, *, owner: str, lease_s: float) -> Claim | None:
    """Lease the step for ``owner`` (attempt + 1), or None if it is not claimable now: done,
    leased by a live worker, not the run's current step, or the run has ended."""
    row = db.one("claim_step", run_id=run_id, step=step, owner=owner, lease_s=lease_s)
    if row is None:
        return None
    return Claim(
        run_id=str(row["run_id"]),
        step=row["step"],
        attempt=row["attempt"],
        generation=row["generation"],
        tenant_id=row["tenant_id"],
        pipeline=row["pipeline"],
        document_id=row["document_id"],
        lane=row["lane"],
        batch_id=str(row["batch_id"]) if row["batch_id"] else None,
        document=row["document"],
        outputs=dict(row["outputs"]),
    )


def step_state(db: Database, run_id: str, step: str) -> Row | None:
    return db.one("step_state", run_id=run_id, step=step)


def renew_lease(db: Database, run_id: str, step: str, *, owner: str, lease_s: float) -> bool:
    """False when the lease is no longer ours (expired and taken over, or the run ended)."""
    return db.one("renew_lease", run_id=run_id, step=step, owner=owner, lease_s=lease_s) is not None


def release_step(
    db: Database,
    run_id: str,
    step: str,
    *,
    owner: str,
    retry_in_s: float,
    error: str,
    refund_attempt: bool = False,
) -> bool:
    """Hand a leased step back after a transient error, to be retried in ``retry_in_s``;
    ``refund_attempt`` when the step never got to fail (it only waited for a slot)."""
    row = db.one(
        "release_step",
        run_id=run_id,
        step=step,
        owner=owner,
        retry_in_s=retry_in_s,
        error=error[:2000],
        refund=int(refund_attempt),
    )
    return row is not None


@dataclass(frozen=True)
class RecordedStep:
    run_status: str
    batch_id: str | None
    outbox_ids: tuple[int, ...]


def record_step_result(
    db: Database,
    claim: Claim,
    *,
    owner: str,
    output: dict[str, Any],
    model: str,
    prompt_version: str,
    next_step: str | None,
) -> RecordedStep | None:
    """Mark the step done with its output, tokens and cost, advance the run and enqueue its
    next step, all in one statement. None if the lease was lost or the run has ended."""
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
    )
    if row is None:
        return None
    return RecordedStep(
        run_status=row["status"],
        batch_id=str(row["batch_id"]) if row["batch_id"] else None,
        outbox_ids=tuple(row["outbox_ids"]),
    )


def fail_run(
    db: Database, run_id: str, step: str, *, owner: str | None, status: str, error: str
) -> bool:
    """End the run at ``step`` as 'failed' (permanent error) or 'needs_review' (retries
    exhausted, output still invalid)."""
    if status not in ("failed", "needs_review", "budget_exceeded"):
        raise ValueError(f"not a failure status: {status}")
    row = db.one(
        "fail_run", run_id=run_id, step=step, owner=owner, status=status, error=error[:2000]
    )
    return row is not None


def abandon_step(db: Database, run_id: str, step: str, *, owner: str) -> None:
    db.execute("abandon_step", run_id=run_id, step=step, owner=owner)


def cancel_run(db: Database, tenant_id: str, run_id: str) -> bool:
    """Stop the run; False if it had already ended (or does not exist for this tenant)."""
    return db.one("cancel_run", tenant_id=tenant_id, run_id=run_id) is not None


def expire_run(db: Database, run_id: str) -> bool:
    """End the run as 'expired' if its deadline has passed."""
    return db.one("expire_run", run_id=run_id) is not None


def restart_run(db: Database, tenant_id: str, run_id: str, from_step: str | None) -> CreatedRun:
    """Reopen an ended run at ``from_step`` (default: its first unfinished step), keeping
    and not re-paying the finished steps before it."""
    status = run_progress(db, tenant_id, run_id)
    pipeline = get_pipeline(status.pipeline)
    if from_step is None:
        from_step = next(
            (s["step"] for s in status.steps if s["status"] != "done"), pipeline.steps[0].name
        )
    index = pipeline.index_of(from_step)
    with db.transaction() as tx:
        reopened = tx.all(
            "restart_run", tenant_id=tenant_id, run_id=run_id, step=from_step, step_index=index
        )
        if not reopened:
            if status.status not in ENDED_RUN_STATUSES:
                raise ConflictError(f"run {run_id} is {status.status}; only ended runs restart")
            batch = status.batch_id and tx.one("batch_status", batch_id=status.batch_id)
            if batch and batch["status"] in ("cancelled", "budget_exceeded"):
                raise ConflictError(
                    f"run {run_id} belongs to batch {status.batch_id}, which is "
                    f"{batch['status']}; its runs stay stopped"
                )
            raise ConflictError(
                f"run {run_id} cannot restart at {from_step!r}: an earlier step is not done"
            )
        outbox_ids = enqueue_step(tx, run_id, from_step)
    return CreatedRun(run_id, created=False, outbox_ids=outbox_ids)


@dataclass(frozen=True)
class Progress:
    run_id: str
    pipeline: str
    document_id: str
    lane: str
    batch_id: str | None
    status: str
    current_step: str | None
    steps_done: int
    steps_total: int
    cost_so_far_usd: Decimal
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    steps: list[Row]
    webhook: dict[str, Any] | None = None

    @property
    def result(self) -> dict[str, Any] | None:
        """The pipeline's combined output once the run is done."""
        if self.status != "done":
            return None
        return {s["step"]: s["output"] for s in self.steps}


def run_progress(
    db: Database, tenant_id: str, run_id: str, *, with_output: bool = False
) -> Progress:
    """Status, current step, steps done/total, cost so far and per-step detail."""
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise NotFoundError(f"run {run_id!r} does not exist") from None
    with db.session() as s:
        run = s.one("run_status", tenant_id=tenant_id, run_id=run_id)
        if run is None:
            raise NotFoundError(f"run {run_id} does not exist")
        steps = s.all("run_steps", run_id=run_id, with_output=with_output)
    return Progress(
        run_id=str(run["id"]),
        pipeline=run["pipeline"],
        document_id=run["document_id"],
        lane=run["lane"],
        batch_id=str(run["batch_id"]) if run["batch_id"] else None,
        status=run["status"],
        current_step=run["current_step"] if run["status"] in ACTIVE_RUN_STATUSES else None,
        steps_done=run["steps_done"],
        steps_total=run["steps_total"],
        cost_so_far_usd=run["cost_usd"],
        error=run["error"],
        created_at=run["created_at"],
        finished_at=run["finished_at"],
        steps=steps,
        webhook=run["webhook"],
    )
