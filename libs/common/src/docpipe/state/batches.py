"""Batches: many documents submitted at once, processed in the batch lane.

A batch's runs are created in one transaction and wait in PostgreSQL; ``admission`` lets
them into the ``llm_batch`` queue at the pace the workers absorb, so the Redis queue stays
short and a cancel is instant: nothing but a handful of messages was ever enqueued.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
import redis

from docpipe.broker.queues import LANE_QUEUES, purge_runs
from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe.pipelines.model import Pipeline
from docpipe.state.db import Database, Session
from docpipe.state.documents import DOCUMENT_ID
from docpipe.state.runs import inline_step_version, request_hash
from docpipe.statuses import BatchStatus, Lane, Priority

__all__ = [
    "BatchDocument",
    "BatchProgress",
    "BatchRun",
    "CreatedBatch",
    "batch_progress",
    "batch_runs",
    "create_batch",
    "stop_batch",
    "store_documents",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchDocument:
    """A document of a batch: new text to store under ``id``, or (text None) an id stored
    earlier."""

    id: str
    text: str | None = None


@dataclass(frozen=True)
class CreatedBatch:
    batch_id: str
    created: bool
    runs_total: int


def create_batch(
    session: Session,
    *,
    tenant_id: str,
    pipeline: Pipeline,
    documents: Sequence[BatchDocument],
    idempotency_key: str,
    request: dict[str, Any],
    budget_usd: Decimal | None = None,
    run_budget_usd: Decimal | None = None,
    callback_url: str | None = None,
    deadline_at: datetime | None = None,
    traceparent: str | None = None,
    priority: str = Priority.LOW,
    reuse_answers: bool = False,
    provider_batch: bool = False,
) -> CreatedBatch:
    """Store the new documents and create the batch with one waiting run per document, all
    in the caller's transaction. The same idempotency key returns the existing batch. A
    document named twice runs twice (the same text, or a 409 for another one).
    ``provider_batch``: the runs' calls go through their providers' batch interfaces
    (docpipe.state.provider_batches)."""
    if not documents:
        raise InvalidRequestError("a batch needs at least one document")
    ids = [d.id for d in documents]
    if bad := next((i for i in ids if not DOCUMENT_ID.match(i)), None):
        raise InvalidRequestError(f"document id {bad[:140]!r} is not a valid id")
    fingerprint = request_hash(request)
    batch_id = uuid.uuid4()
    row = session.insert_or_existing(
        "create_batch",
        id=batch_id,
        tenant_id=tenant_id,
        pipeline=pipeline.key,
        runs_total=len(documents),
        budget_usd=budget_usd,
        run_budget_usd=run_budget_usd,
        callback_url=callback_url,
        deadline_at=deadline_at,
        idempotency_key=idempotency_key,
        request_hash=fingerprint,
        provider_batch=provider_batch,
    )
    if not row["created"]:
        if row["request_hash"] != fingerprint:
            raise ConflictError(
                f"idempotency key {idempotency_key!r} was already used for a different batch"
            )
        return CreatedBatch(str(row["id"]), created=False, runs_total=len(documents))
    store_documents(session, tenant_id, [d for d in documents if d.text is not None])
    if missing := session.all("missing_documents", tenant_id=tenant_id, ids=ids):
        raise NotFoundError(
            "documents not found: "
            + ", ".join(repr(r["id"]) for r in missing)
            + (" (and more)" if len(missing) == 10 else "")
        )
    try:
        session.execute(
            "create_batch_runs",
            tenant_id=tenant_id,
            pipeline=pipeline.key,
            batch_id=str(batch_id),
            pipeline_hash=pipeline.definition_hash,
            steps=pipeline.step_names,
            run_budget_usd=run_budget_usd,
            deadline_at=deadline_at,
            priority=priority,
            document_ids=ids,
            traceparent=traceparent,
            inline_step=inline_step_version(pipeline),
            reuse_answers=reuse_answers,
            provider_batch=provider_batch,
        )
    except psycopg.errors.ForeignKeyViolation:
        # A stored document was deleted since missing_documents looked (state.documents).
        raise NotFoundError("a document of the batch was deleted meanwhile") from None
    return CreatedBatch(str(batch_id), created=True, runs_total=len(documents))


# Texts go to PostgreSQL in statements of about this many bytes: the driver builds each
# statement as one more copy of its texts, so one statement for a whole batch would double
# the memory a batch body costs the API (bench/api_memory.py).
_STORE_STATEMENT_BYTES = 4_000_000


def store_documents(session: Session, tenant_id: str, documents: Sequence[BatchDocument]) -> None:
    """Store new text documents in statements of a few MB; ConflictError for an id stored
    with another text (documents are immutable)."""
    conflicts: list[str] = []
    # put_documents compares with what was stored before it, not among its own rows: a
    # document given twice with two texts is caught here, across groups.
    first: dict[str, str] = {}
    for group in _groups_of_bytes(documents, _STORE_STATEMENT_BYTES):
        texts = [d.text or "" for d in group]
        if any("\x00" in t for t in texts):
            raise InvalidRequestError("document text must not contain NUL characters")
        sha256s, sizes = [], []
        for document, text in zip(group, texts, strict=True):  # one encoded copy at a time
            data = text.encode("utf-8")
            sha256s.append(hashlib.sha256(data).hexdigest())
            sizes.append(len(data))
            if first.setdefault(document.id, sha256s[-1]) != sha256s[-1]:
                raise ConflictError(
                    "a document is given twice with different texts (documents are "
                    f"immutable): {document.id!r}"
                )
        rows = session.all(
            "put_documents",
            tenant_id=tenant_id,
            ids=[d.id for d in group],
            contents=texts,
            sha256s=sha256s,
            sizes=sizes,
        )
        conflicts += [r["id"] for r in rows]
    if conflicts:
        raise ConflictError(
            "documents already stored with different content (documents are immutable): "
            + ", ".join(repr(i) for i in conflicts[:10])
        )


def _groups_of_bytes(
    documents: Sequence[BatchDocument], limit: int
) -> Iterator[Sequence[BatchDocument]]:
    """``documents`` in consecutive groups of at most ``limit`` characters of text (or one
    document, when it alone is longer)."""
    start, size = 0, 0
    for index, document in enumerate(documents):
        length = len(document.text or "")
        if index > start and size + length > limit:
            yield documents[start:index]
            start, size = index, 0
        size += length
    if start < len(documents):
        yield documents[start:]


@dataclass(frozen=True)
class BatchProgress:
    """A batch as its owner sees it, from one query."""

    batch_id: str
    pipeline: str
    status: str
    runs_total: int
    runs_by_status: dict[str, int]
    waiting_admission: int  # runs still waiting in PostgreSQL
    steps_done: int
    steps_total: int
    cost_so_far_usd: Decimal
    budget_usd: Decimal | None
    created_at: datetime
    finished_at: datetime | None
    webhook: dict[str, Any] | None  # its latest webhook delivery
    # The provider-batch lane: whether the batch asked for it, and what its calls would
    # have cost in real time (the cost so far plus what the discount saved).
    provider_batch: bool
    realtime_cost_usd: Decimal
    # What its runs' calls waiting for provider batches reserved of its budget (not paid yet).
    reserved_usd: Decimal
    # What the ETA is computed from.
    steps_remaining: int
    first_admitted_at: datetime | None
    now: datetime

    @property
    def eta_s(self) -> float | None:
        """Seconds until the remaining steps are done at the pace observed since admission."""
        if self.status != BatchStatus.RUNNING:
            return 0.0
        if self.steps_remaining == 0:
            return None
        elapsed = (
            (self.now - self.first_admitted_at).total_seconds() if self.first_admitted_at else 0.0
        )
        if elapsed <= 0 or not self.steps_done:
            return None
        return round(self.steps_remaining / (self.steps_done / elapsed), 1)


def batch_progress(db: Database, tenant_id: str, batch_id: str) -> BatchProgress:
    """Counts per status, steps, cost so far and an ETA, from one query."""
    try:
        uuid.UUID(batch_id)
    except ValueError:
        raise NotFoundError(f"batch {batch_id!r} does not exist") from None
    progress = db.one_as(BatchProgress, "batch_progress", tenant_id=tenant_id, batch_id=batch_id)
    if progress is None:
        raise NotFoundError(f"batch {batch_id} does not exist")
    return progress


@dataclass(frozen=True)
class BatchRun:
    run_id: str
    document_id: str
    status: str
    current_step: str | None
    steps_done: int
    steps_total: int
    cost_usd: Decimal
    error: str | None


def batch_runs(
    db: Database,
    tenant_id: str,
    batch_id: str,
    *,
    status: str | None = None,
    after: str | None = None,
    limit: int = 100,
) -> list[BatchRun]:
    """A page of the batch's runs, by run id after ``after``."""
    batch_progress(db, tenant_id, batch_id)  # 404 for unknown batches
    # One statement per shape (with a status or without), each with its own index, and the
    # nil id (before every run id) for the first page: no optional filter that a prepared
    # statement's generic plan would have to cover.
    return db.all_as(
        BatchRun,
        "batch_runs" if status is None else "batch_runs_of_status",
        tenant_id=tenant_id,
        batch_id=batch_id,
        status=status,
        after=after or uuid.UUID(int=0),
        limit=limit,
    )


_LOCK_RETRIES = 50


def stop_batch(
    db: Database,
    tenant_id: str,
    batch_id: str,
    *,
    status: str,
    reason: str,
    broker_redis: redis.Redis | None = None,
) -> list[str]:
    """End a running batch as ``status``; returns the runs it stopped (empty if the batch
    had already ended). Their waiting messages are removed from the broker when given, if
    it answers: the stop is committed first, and a message of a stopped run is a no-op when
    a worker takes it, so a broker outage leaves work behind for no one."""
    # A worker that is paid for a call locks its run, then the batch (docpipe.providers.calls); this
    # takes the runs first and the batch last, or it would hold the batch while waiting for
    # such a run, and that worker wait for the batch. A worker claiming a run's first step
    # still locks the step before the run: rather than wait for PostgreSQL to find that
    # deadlock (deadlock_timeout, 1 s by default, each time), the transaction gives up on
    # any lock it cannot have at once; it was rolled back whole and is guarded, so it is
    # simply retried.
    params = {"tenant_id": tenant_id, "batch_id": batch_id}
    for attempt in range(_LOCK_RETRIES):
        try:
            with db.transaction() as tx:
                tx.conn.execute("SET LOCAL lock_timeout = '50ms'")
                row = tx.one("stop_batch_runs", status=status, reason=reason, **params)
                assert row is not None
                run_ids: list[str] = row["run_ids"]
                if tx.one("end_stopped_batch", status=status, **params) is None:
                    run_ids = []
                    raise psycopg.Rollback()  # it ended meanwhile: change nothing
                tx.execute("cancel_pending_steps", run_ids=run_ids)
            break
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            if attempt == _LOCK_RETRIES - 1:
                raise
            time.sleep(random.uniform(0, 0.02))
    if broker_redis is not None and run_ids:
        try:
            purge_runs(broker_redis, LANE_QUEUES[Lane.BATCH], set(run_ids))
        except redis.RedisError as exc:
            log.warning(
                "batch %s stopped; its waiting messages stay queued as no-ops (%s: %s)",
                batch_id,
                type(exc).__name__,
                exc,
            )
    return run_ids


def finish_batches(db: Database) -> int:
    """Mark batches whose runs have all ended as done; returns how many."""
    return len(db.all("finish_batches"))
