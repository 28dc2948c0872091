"""Runs: poll or stream a run's progress, cancel it, retry it from a step."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from docpipe import statuses
from docpipe.errors import ConflictError
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox
from docpipe_api.deps import BrokerDep, DatabaseDep, PipelinesDep, TenantDep
from docpipe_api.errors import error_responses
from docpipe_api.schemas import RunStatus

__all__ = ["router"]

router = APIRouter(tags=["runs"])

POLL_INTERVAL_S = 0.5
# The schema of each event of the stream (keepalive comments are not events).
_SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"enum": ["progress", "end"]},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "the run's status as GET /runs/{run_id} gives it ('progress': "
            "without the result)",
        },
    },
    "required": ["event", "data"],
}
KEEPALIVE_INTERVAL_S = 15.0


# Runs whose step outputs are shown: the result once done, the values with their evidence
# also in review (what a reviewer checks).
_WITH_OUTPUT = (statuses.RunStatus.DONE, statuses.RunStatus.NEEDS_REVIEW)


def run_status(db: Database, tenant: str, run_id: str) -> RunStatus:
    """The run's status body; the result (step outputs) only once it is done, the values
    with their evidence once it is done or needs review."""
    progress = runs.run_progress(db, tenant, run_id)
    if progress.status in _WITH_OUTPUT:
        progress = runs.run_progress(db, tenant, run_id, with_output=True)
    return RunStatus.model_validate(progress)


@router.get(
    "/runs/{run_id}",
    response_model=RunStatus,
    summary="A run's status, steps, cost and (once done) result and values with evidence",
    responses=error_responses(404, 422, 503),
)
def read_run(run_id: str, db: DatabaseDep, tenant: TenantDep) -> RunStatus:
    return run_status(db, tenant, run_id)


@router.post(
    "/runs/{run_id}/cancel",
    response_model=RunStatus,
    summary="Stop a run; no further steps start",
    responses=error_responses(404, 409, 422, 503),
)
def cancel_run(run_id: str, db: DatabaseDep, tenant: TenantDep) -> RunStatus:
    runs.run_progress(db, tenant, run_id)  # 404 for unknown runs
    if not runs.cancel_run(db, tenant, run_id):
        status = runs.run_progress(db, tenant, run_id).status
        raise ConflictError(f"run {run_id} has already ended ({status}); nothing to cancel")
    return run_status(db, tenant, run_id)


@router.post(
    "/runs/{run_id}/retry",
    status_code=202,
    response_model=RunStatus,
    summary="Reopen an ended run at a step, keeping the finished steps before it",
    responses=error_responses(404, 409, 422, 503),
)
def retry_run(
    run_id: str,
    db: DatabaseDep,
    broker: BrokerDep,
    pipelines: PipelinesDep,
    tenant: TenantDep,
    from_step: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="default: the run's first step not done"),
    ] = None,
) -> RunStatus:
    restarted = runs.restart_run(db, tenant, run_id, from_step, pipelines=pipelines)
    publish_outbox(db, broker, restarted.outbox_ids)
    return run_status(db, tenant, run_id)


@router.get(
    "/runs/{run_id}/events",
    response_class=StreamingResponse,
    summary="Server-Sent Events: 'progress' on every change, then 'end' with the final status",
    responses={
        200: {
            "description": "An event stream that closes once the run has ended",
            "content": {"text/event-stream": {"schema": _SSE_EVENT}},
        },
        **error_responses(404, 422, 503),
    },
)
def stream_run_events(
    run_id: str, request: Request, db: DatabaseDep, tenant: TenantDep
) -> StreamingResponse:
    first = runs.run_progress(db, tenant, run_id)  # unknown runs are a 404, not an empty stream
    return StreamingResponse(
        _progress_events(request, db, tenant, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _event(name: str, body: RunStatus) -> str:
    return f"event: {name}\ndata: {body.model_dump_json(exclude={'result', 'values'})}\n\n"


async def _progress_events(
    request: Request, db: Database, tenant: str, progress: runs.Progress
) -> AsyncIterator[str]:
    read = partial(runs.run_progress, db, tenant, progress.run_id)
    last_seen: tuple[object, ...] | None = None
    last_sent = time.monotonic()
    while progress.status not in statuses.ENDED_RUN_STATUSES:
        seen = (
            progress.status,
            progress.current_step,
            progress.steps_done,
            progress.cost_so_far_usd,
        )
        if seen != last_seen:
            yield _event("progress", RunStatus.model_validate(progress))
            last_seen, last_sent = seen, time.monotonic()
        elif time.monotonic() - last_sent >= KEEPALIVE_INTERVAL_S:
            yield ": keepalive\n\n"
            last_sent = time.monotonic()
        await anyio.sleep(POLL_INTERVAL_S)
        if await request.is_disconnected():
            return
        progress = await anyio.to_thread.run_sync(read)
    final = await anyio.to_thread.run_sync(run_status, db, tenant, progress.run_id)
    yield f"event: end\ndata: {final.model_dump_json()}\n\n"
