"""Batches: submit many documents at once, follow them in one request, cancel them."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated

import anyio
from anyio.to_thread import run_sync
from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import ValidationError

from docpipe import statuses
from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.observability import metrics
from docpipe.pipelines.model import Pipeline
from docpipe.settings import Settings
from docpipe.state import batches
from docpipe.state.admission import admit_after_commit
from docpipe.state.db import Database
from docpipe.statuses import Lane, Priority
from docpipe_api.bounds import accepted_callback_url, checked_deadline, run_budget
from docpipe_api.deps import (
    BatchBodiesDep,
    BrokerDep,
    DatabaseDep,
    IdempotencyKeyDep,
    PipelinesDep,
    RedisDep,
    SettingsDep,
    TenantDep,
    read_capped,
    require_json,
)
from docpipe_api.errors import describe_validation_errors, error_responses
from docpipe_api.links import follow
from docpipe_api.schemas import (
    BatchAccepted,
    BatchRequest,
    BatchRun,
    BatchRunsPage,
    BatchStatus,
    request_body_schema,
)

__all__ = ["router"]

router = APIRouter(tags=["batches"])

# A busy slot frees as soon as another batch is stored: seconds, not minutes.
_BUSY_RETRY_AFTER_S = 2


@router.post(
    "/batches",
    status_code=202,
    response_model=BatchAccepted,
    summary="Submit many documents (inline texts or stored ids) for the batch lane",
    responses={
        202: follow(
            "batch_id",
            "batch_id",
            "read_batch",
            "list_batch_runs",
            "cancel_batch",
            "export_batch_results",
        ),
        **error_responses(403, 404, 409, 413, 415, 422, 503),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request_body_schema(BatchRequest)}},
        }
    },
)
async def submit_batch(
    request: Request,
    key: IdempotencyKeyDep,
    settings: SettingsDep,
    db: DatabaseDep,
    broker: BrokerDep,
    pipelines: PipelinesDep,
    bodies: BatchBodiesDep,
    tenant: TenantDep,
    response: Response,
) -> BatchAccepted:
    """All runs are created in one transaction and wait in PostgreSQL for admission; the
    free slots of the admission window are filled at once."""
    require_json(request)
    # The body, its parsed texts and the rows made of them stay in memory until the runs
    # are stored: holding a slot for all of it is what bounds the API's memory.
    try:
        bodies.acquire_nowait()
    except anyio.WouldBlock:
        raise HTTPException(
            503,
            "this API process is receiving as many batches as it may hold in memory; retry",
            headers={"Retry-After": str(_BUSY_RETRY_AFTER_S)},
        ) from None
    try:
        batch = _checked_batch(await read_capped(request, settings.max_batch_bytes), settings)
        pipeline = pipelines.get(batch.pipeline)
        limits = _RunLimits(
            deadline_at=checked_deadline(batch.deadline_s, datetime.now(UTC), settings),
            run_budget_usd=run_budget(batch.run_budget_usd, settings, field="run_budget_usd"),
        )
        callback_url = await run_sync(
            accepted_callback_url, db, settings, tenant, batch.callback_url
        )
        # Creating thousands of runs blocks for a while: keep it off the event loop.
        created = await run_sync(_create, db, tenant, pipeline, batch, limits, key, callback_url)
    finally:
        bodies.release()
    if created.created:
        metrics.metrics().runs_created.labels(pipeline.key, "batch").inc(created.runs_total)
        await run_sync(admit_after_commit, db, broker, settings)
    response.headers["Location"] = f"/batches/{created.batch_id}"
    return BatchAccepted(
        batch_id=created.batch_id,
        status=statuses.BatchStatus.RUNNING,
        runs_total=created.runs_total,
        created=created.created,
    )


def _checked_batch(body: bytearray, settings: Settings) -> BatchRequest:
    """The batch, within every bound: 422 for too many documents, 413 for a document over
    DOCPIPE_MAX_DOCUMENT_BYTES (naming it), as PUT /documents would answer for it alone."""
    try:
        batch = BatchRequest.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_errors(exc.errors(), prefix="body")) from None
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
    return batch


@dataclass(frozen=True)
class _RunLimits:
    """What every run of the batch gets, the request's options checked against the settings
    (the fingerprint keeps the options as they were asked)."""

    deadline_at: datetime | None
    run_budget_usd: Decimal | None


def _create(
    db: Database,
    tenant: str,
    pipeline: Pipeline,
    batch: BatchRequest,
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
        **batch.model_dump(mode="json", exclude={"documents", "pipeline", "priority"}),
        **({"priority": batch.priority} if batch.priority else {}),
    }
    with db.transaction() as tx:
        return batches.create_batch(
            tx,
            tenant_id=tenant,
            pipeline=pipeline,
            documents=documents,
            idempotency_key=key or uuid.uuid4().hex,
            request=fingerprint,
            budget_usd=batch.budget_usd,
            run_budget_usd=limits.run_budget_usd,
            priority=batch.priority or Priority.default_for(Lane.BATCH),
            callback_url=callback_url,
            deadline_at=limits.deadline_at,
        )


@router.get(
    "/batches/{batch_id}",
    response_model=BatchStatus,
    summary="Runs per status, steps, cost so far and ETA of a batch, in one request",
    responses=error_responses(404, 422, 503),
)
def read_batch(batch_id: str, db: DatabaseDep, tenant: TenantDep) -> BatchStatus:
    return BatchStatus.model_validate(batches.batch_progress(db, tenant, batch_id))


@router.get(
    "/batches/{batch_id}/runs",
    response_model=BatchRunsPage,
    summary="A page of the batch's runs",
    responses=error_responses(404, 422, 503),
)
def list_batch_runs(
    batch_id: str,
    db: DatabaseDep,
    tenant: TenantDep,
    status: statuses.RunStatus | None = None,
    after: Annotated[uuid.UUID | None, Query(description="next_after of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> BatchRunsPage:
    rows = batches.batch_runs(db, tenant, batch_id, status=status,
                              after=str(after) if after else None, limit=limit)  # fmt: skip
    return BatchRunsPage(
        runs=[BatchRun.model_validate(r) for r in rows],
        next_after=rows[-1].run_id if len(rows) == limit else None,
    )


@router.post(
    "/batches/{batch_id}/cancel",
    response_model=BatchStatus,
    summary="Stop a batch: no step that has not started will run; nothing stays queued",
    responses=error_responses(404, 409, 422, 503),
)
def cancel_batch(
    batch_id: str, db: DatabaseDep, broker_redis: RedisDep, tenant: TenantDep
) -> BatchStatus:
    current = batches.batch_progress(db, tenant, batch_id)  # 404 for unknown batches
    if current.status != statuses.BatchStatus.RUNNING:
        raise ConflictError(f"batch {batch_id} has already ended ({current.status})")
    batches.stop_batch(db, tenant, batch_id, status=statuses.BatchStatus.CANCELLED,
                       reason="batch cancelled", broker_redis=broker_redis)  # fmt: skip
    return BatchStatus.model_validate(batches.batch_progress(db, tenant, batch_id))
