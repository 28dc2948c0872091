"""A batch: submitted once per idempotency key, followed in one read, cancelled."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from fastapi import HTTPException

from docpipe import statuses
from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.pipelines.model import Pipeline
from docpipe.settings import Settings
from docpipe.state import batches
from docpipe.state.after_commit import AfterCommit, CreatedRuns, dispatch_after_commit
from docpipe.statuses import Lane, Priority
from docpipe_api.bounds import accepted_callback_url, checked_deadline, run_budget
from docpipe_api.resources import Caller, Resources
from docpipe_api.schemas import (
    BatchAcceptedOut,
    BatchIn,
    BatchRunOut,
    BatchRunsPageOut,
    BatchStatusOut,
)

__all__ = ["batch_runs", "batch_status", "cancel_batch", "submit_batch"]


def submit_batch(
    *, resources: Resources, caller: Caller, batch: BatchIn, idempotency_key: str | None
) -> BatchAcceptedOut:
    """All runs are created in one transaction and wait in PostgreSQL for admission; the
    free slots of the admission window are filled at once. The same idempotency key returns
    the same batch; with another request it is a ConflictError. Blocks for a while with
    thousands of documents: an async caller runs it in a thread."""
    settings, db = resources.settings, resources.database
    _check_sizes(batch, settings)
    pipeline = resources.pipelines.get(batch.pipeline)
    limits = _RunLimits(
        deadline_at=checked_deadline(batch.deadline_s, datetime.now(UTC), settings),
        run_budget_usd=run_budget(batch.run_budget_usd, settings, field="run_budget_usd"),
    )
    callback_url = accepted_callback_url(db, settings, caller.tenant, batch.callback_url)
    created = _create(resources, caller, pipeline, batch, limits, idempotency_key, callback_url)
    if created.created:
        after = AfterCommit(
            admit=True, created=CreatedRuns(pipeline.key, Lane.BATCH, count=created.runs_total)
        )
        dispatch_after_commit(db, resources.broker, settings, after)
    return BatchAcceptedOut(
        batch_id=created.batch_id,
        status=statuses.BatchStatus.RUNNING,
        runs_total=created.runs_total,
        created=created.created,
    )


def _check_sizes(batch: BatchIn, settings: Settings) -> None:
    """422 for too many documents, 413 for a document over DOCPIPE_MAX_DOCUMENT_BYTES
    (naming it), as PUT /documents would answer for it alone."""
    if len(batch.documents) > settings.max_batch_documents:
        raise InvalidRequestError(
            f"{len(batch.documents)} documents in one batch; the limit is "
            f"{settings.max_batch_documents} (split it into several batches)"
        )
    limit = settings.max_document_bytes
    for index, document in enumerate(batch.documents):
        # A text of more characters than the limit has more bytes too: no need to encode it.
        if document.text is not None and (
            len(document.text) > limit or len(document.text.encode()) > limit
        ):
            name = f" ({document.id!r})" if document.id is not None else ""
            raise HTTPException(
                413,
                f"documents[{index}]{name} is larger than the limit of {limit} bytes per "
                f"document; nothing was stored",
            )


@dataclass(frozen=True)
class _RunLimits:
    """What every run of the batch gets, the request's options checked against the settings
    (the fingerprint keeps the options as they were asked)."""

    deadline_at: datetime | None
    run_budget_usd: Decimal | None


def _create(
    resources: Resources,
    caller: Caller,
    pipeline: Pipeline,
    batch: BatchIn,
    limits: _RunLimits,
    key: str | None,
    callback_url: str | None,
) -> batches.CreatedBatch:
    documents = [
        batches.BatchDocument(id=d.id or uuid.uuid4().hex, text=d.text) for d in batch.documents
    ]
    # The fingerprint names each document as the request did (its id, or none) and by its
    # content hash: equal requests compare equal without keeping megabytes of text around,
    # and the ids generated above for documents without one do not make a replay differ.
    fingerprint = {
        "pipeline": pipeline.key,
        "documents": [
            [d.id, hashlib.sha256(d.text.encode()).hexdigest() if d.text is not None else None]
            for d in batch.documents
        ],
        **batch.model_dump(
            mode="json",
            exclude={"documents", "pipeline", "priority", "reuse_answers", "provider_batch"},
        ),
        # Options added later count only when set: an earlier request's replay stays equal.
        **({"priority": batch.priority} if batch.priority else {}),
        **({"reuse_answers": True} if batch.reuse_answers else {}),
        **({"provider_batch": True} if batch.provider_batch else {}),
    }
    with resources.database.transaction() as tx:
        return batches.create_batch(
            tx,
            tenant_id=caller.tenant,
            pipeline=pipeline,
            documents=documents,
            idempotency_key=key or uuid.uuid4().hex,
            request=fingerprint,
            budget_usd=batch.budget_usd,
            run_budget_usd=limits.run_budget_usd,
            priority=batch.priority or Priority.default_for(Lane.BATCH),
            callback_url=callback_url,
            deadline_at=limits.deadline_at,
            reuse_answers=batch.reuse_answers,
            provider_batch=batch.provider_batch,
        )


def batch_status(*, resources: Resources, caller: Caller, batch_id: str) -> BatchStatusOut:
    """Runs per status, steps, cost so far and ETA of the batch, in one read."""
    found = batches.batch_progress(resources.database, caller.tenant, batch_id)
    return BatchStatusOut.model_validate(found)


def batch_runs(
    *,
    resources: Resources,
    caller: Caller,
    batch_id: str,
    status: statuses.RunStatus | None = None,
    after: str | None = None,
    limit: int = 100,
) -> BatchRunsPageOut:
    """A page of the batch's runs (of ``status``), in run id order after ``after``."""
    rows = batches.batch_runs(
        resources.database, caller.tenant, batch_id, status=status, after=after, limit=limit
    )
    return BatchRunsPageOut(
        runs=[BatchRunOut.model_validate(r) for r in rows],
        next_after=rows[-1].run_id if len(rows) == limit else None,
    )


def cancel_batch(*, resources: Resources, caller: Caller, batch_id: str) -> BatchStatusOut:
    """No step of the batch that has not started will run, and nothing of it stays queued.
    ConflictError once the batch has ended."""
    db = resources.database
    current = batches.batch_progress(db, caller.tenant, batch_id)  # 404 for unknown batches
    if current.status != statuses.BatchStatus.RUNNING:
        raise ConflictError(f"batch {batch_id} has already ended ({current.status})")
    batches.stop_batch(
        db,
        caller.tenant,
        batch_id,
        status=statuses.BatchStatus.CANCELLED,
        reason="batch cancelled",
        broker_redis=resources.redis,
    )
    return batch_status(resources=resources, caller=caller, batch_id=batch_id)
