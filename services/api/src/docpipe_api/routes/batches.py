"""Batches: submit many documents at once, follow them in one request, cancel them."""

from __future__ import annotations

import uuid
from typing import Annotated

import anyio
from fastapi import APIRouter, HTTPException, Query, Request, Response

from docpipe import statuses
from docpipe.state import lists
from docpipe.state.cursors import CURSOR_PATTERN
from docpipe_api import actions
from docpipe_api.bodies import parsed_json_in_turn, read_capped, require_json
from docpipe_api.bounds import check_batch_documents
from docpipe_api.deps import CallerDep, IdempotencyKeyDep, ResourcesDep
from docpipe_api.errors import error_responses
from docpipe_api.links import follow
from docpipe_api.list_schemas import BatchPage, IsoTime
from docpipe_api.schemas import (
    BatchAcceptedOut,
    BatchIn,
    BatchRunsPageOut,
    BatchStatusOut,
    request_body_schema,
)

__all__ = ["router"]

router = APIRouter(tags=["batches"])

# A busy slot frees as soon as another batch is stored: seconds, not minutes.
_BUSY_RETRY_AFTER_S = 2


@router.post(
    "/batches",
    status_code=202,
    response_model=BatchAcceptedOut,
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
            "content": {"application/json": {"schema": request_body_schema(BatchIn)}},
        }
    },
)
async def submit_batch(
    request: Request,
    key: IdempotencyKeyDep,
    resources: ResourcesDep,
    caller: CallerDep,
    response: Response,
) -> BatchAcceptedOut:
    """All runs are created in one transaction and wait in PostgreSQL for admission; the
    free slots of the admission window are filled at once."""
    require_json(request)
    bodies = resources.batch_bodies
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
        body = await read_capped(
            request, resources.settings.max_batch_bytes, setting="DOCPIPE_MAX_BATCH_BYTES"
        )

        def submit() -> BatchAcceptedOut:
            # Counting, parsing and creating thousands of runs block for seconds: never
            # on the event loop.
            check_batch_documents(body, resources.settings.max_batch_documents)
            return actions.submit_batch(
                resources=resources,
                caller=caller,
                batch=parsed_json_in_turn(BatchIn, body),
                idempotency_key=key,
            )

        accepted = await resources.heavy.run("storing a batch", submit)
    finally:
        bodies.release()
    response.headers["Location"] = f"/batches/{accepted.batch_id}"
    return accepted


@router.get(
    "/batches",
    response_model=BatchPage,
    summary="The tenant's batches, newest first, with their progress and cost",
    responses=error_responses(422, 503),
)
def list_batches(
    resources: ResourcesDep,
    caller: CallerDep,
    status: Annotated[statuses.BatchStatus | None, Query(description="only batches in it")] = None,
    pipeline: Annotated[
        str | None, Query(pattern=lists.PIPELINE_KEY_PATTERN, description="a key: name:vN")
    ] = None,
    created_after: Annotated[IsoTime | None, Query(description="inclusive")] = None,
    created_before: Annotated[IsoTime | None, Query(description="exclusive")] = None,
    needs_review: Annotated[
        bool, Query(description="only batches with runs awaiting a person")
    ] = False,
    cursor: Annotated[
        str | None, Query(pattern=CURSOR_PATTERN, description="next_cursor of the page before")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=lists.MAX_BATCH_PAGE)] = 20,
) -> BatchPage:
    """Each page read from an index whatever the tenant's history, each batch with its runs
    counted by status (``next_cursor`` for the next page)."""
    filters = lists.BatchFilters(
        status=status,
        pipeline=pipeline,
        created_from=created_after,
        created_to=created_before,
        needs_review=needs_review,
    )
    return actions.list_batches(
        resources=resources, caller=caller, filters=filters, cursor=cursor, limit=limit
    )


@router.get(
    "/batches/{batch_id}",
    response_model=BatchStatusOut,
    summary="Runs per status, steps, cost so far and ETA of a batch, in one request",
    responses=error_responses(404, 422, 503),
)
def read_batch(batch_id: str, resources: ResourcesDep, caller: CallerDep) -> BatchStatusOut:
    return actions.batch_status(resources=resources, caller=caller, batch_id=batch_id)


@router.get(
    "/batches/{batch_id}/runs",
    response_model=BatchRunsPageOut,
    summary="A page of the batch's runs",
    responses=error_responses(404, 422, 503),
)
def list_batch_runs(
    batch_id: str,
    resources: ResourcesDep,
    caller: CallerDep,
    status: statuses.RunStatus | None = None,
    after: Annotated[uuid.UUID | None, Query(description="next_after of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> BatchRunsPageOut:
    return actions.batch_runs(
        resources=resources,
        caller=caller,
        batch_id=batch_id,
        status=status,
        after=str(after) if after else None,
        limit=limit,
    )


@router.post(
    "/batches/{batch_id}/cancel",
    response_model=BatchStatusOut,
    summary="Stop a batch: no step that has not started will run; nothing stays queued",
    responses=error_responses(404, 409, 422, 503),
)
def cancel_batch(batch_id: str, resources: ResourcesDep, caller: CallerDep) -> BatchStatusOut:
    return actions.cancel_batch(resources=resources, caller=caller, batch_id=batch_id)
