"""A batch's results in bulk, for the export (GET /batches/{id}/results).

Every run of the batch in the order its documents were sent (their place in the batch
request, then the run id), with each step's output, read through a server-side cursor in a
read-only transaction on a connection of its own: the rows come a chunk at a time, so a
batch of 10,000 runs never sits in the API's memory, and a long download holds none of the
pool's connections. The run id of the last row a client got is its cursor: the rows after
that run's place are the rest, in the same order.

Each run's status is typed the way provider batch APIs type a request's result
(:data:`RESULT_TYPES`): ``succeeded``, ``failed``, ``needs_review``, ``cancelled``, and
``pending`` while the run has not ended. Each run comes with its review while it awaits a
person, and with the decisions made on it (the audit trail, docpipe.state.reviews).
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.state.db import Database
from docpipe.state.reviews import decisions_of
from docpipe.statuses import RunStatus

__all__ = [
    "RESULT_TYPES",
    "BatchResult",
    "ResultType",
    "ResumeCursor",
    "batch_results",
    "check_resume_cursor",
    "run_statuses_named",
]


class ResultType(StrEnum):
    SUCCEEDED = "succeeded"  # done: every step's output is there
    FAILED = "failed"  # ended without a result: an error, its budget or its deadline
    NEEDS_REVIEW = "needs_review"  # waits for a person
    CANCELLED = "cancelled"  # stopped by a cancel of the run or its batch
    PENDING = "pending"  # not ended yet


RESULT_TYPES: Mapping[RunStatus, ResultType] = {
    RunStatus.DONE: ResultType.SUCCEEDED,
    RunStatus.FAILED: ResultType.FAILED,
    RunStatus.BUDGET_EXCEEDED: ResultType.FAILED,
    RunStatus.EXPIRED: ResultType.FAILED,
    RunStatus.NEEDS_REVIEW: ResultType.NEEDS_REVIEW,
    RunStatus.CANCELLED: ResultType.CANCELLED,
    RunStatus.QUEUED: ResultType.PENDING,
    RunStatus.RUNNING: ResultType.PENDING,
}

# Rows fetched from the server at a time: a few MB of outputs at most for document_extract.
CHUNK_ROWS = 200
# A transaction that waits this long for the client to take the next chunk is ended by the
# server; the client resumes after the last line it got.
IDLE_CLIENT_S = 60.0
MAX_STATUS_NAMES = len(RunStatus) + len(ResultType)


@dataclass(frozen=True)
class BatchResult:
    """One run of a batch as the export shows it."""

    run_id: str
    document_id: str
    position: int | None  # the document's place in the batch request, 0-based
    status: str
    error: str | None
    cost_usd: Decimal
    created_at: datetime
    finished_at: datetime | None
    outputs: dict[str, Any]  # every step's output in pipeline order; None until done
    review: dict[str, Any] | None  # while it awaits a person: step, reason(s), revision
    decisions: list[dict[str, Any]] = field(default_factory=list)  # the audit trail

    @property
    def result_type(self) -> ResultType:
        return RESULT_TYPES[RunStatus(self.status)]


def run_statuses_named(names: Iterable[str]) -> tuple[str, ...]:
    """The run statuses that ``names`` ask for, each a result type (``failed``: every status
    typed failed, i.e. failed, budget_exceeded, expired) or a run status; InvalidRequestError
    naming the accepted ones for anything else."""
    wanted: dict[str, None] = {}
    for name in names:
        if name in tuple(ResultType):
            wanted |= dict.fromkeys(s for s, t in RESULT_TYPES.items() if t == name)
        elif name in tuple(RunStatus):
            wanted[name] = None
        else:
            accepted = dict.fromkeys([*ResultType, *RunStatus])
            raise InvalidRequestError(
                f"status: {name[:100]!r} is neither a result type nor a run status "
                f"(one or more, comma-separated, of: {', '.join(accepted)})"
            )
    return tuple(str(s) for s in wanted)


@dataclass(frozen=True)
class ResumeCursor:
    """Where an export goes on: after this run, at this place in the batch request."""

    position: int
    run_id: str


def check_resume_cursor(db: Database, tenant_id: str, batch_id: str, after: str) -> ResumeCursor:
    """``after`` (the run id of the last line a client got) as the place to go on after:
    InvalidRequestError when it is no run id, ConflictError when it names no run of the
    batch (it would resume nothing)."""
    try:
        run_id = str(uuid.UUID(after))
    except ValueError:
        raise InvalidRequestError(
            f"after: {after[:100]!r} is not a run id (give the run_id of the last line you got)"
        ) from None
    found = db.one("batch_has_run", tenant_id=tenant_id, batch_id=batch_id, run_id=run_id)
    if found is None:
        raise ConflictError(f"after: run {run_id} is not a run of batch {batch_id}")
    return ResumeCursor(found["position"], run_id)


def batch_results(
    db: Database,
    tenant_id: str,
    batch_id: str,
    *,
    statuses: Sequence[str] = (),
    after: ResumeCursor | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> Generator[list[BatchResult]]:
    """The batch's runs (those with one of ``statuses``; all when empty) after ``after``,
    in the order their documents were sent, ``chunk_rows`` at a time. The caller checks the
    batch is the tenant's first (:func:`docpipe.state.batches.batch_progress`, a 404 before
    the answer starts); nothing is read until the first chunk is asked for."""
    with db.detached_transaction(application_name="docpipe-export", idle_s=IDLE_CLIENT_S) as tx:
        for chunk in tx.chunks_as(
            BatchResult,
            "batch_results",
            rows=chunk_rows,
            tenant_id=tenant_id,
            batch_id=batch_id,
            # Every status and a place before the first (position -1, the nil id) when not
            # asked for: one shape, no optional filter.
            statuses=list(statuses) or [s.value for s in RunStatus],
            after_position=after.position if after else -1,
            after=after.run_id if after else uuid.UUID(int=0),
        ):
            decided = decisions_of(db, tenant_id, [r.run_id for r in chunk])
            yield [replace(r, decisions=decided.get(r.run_id, [])) for r in chunk]
