"""Runs: poll or stream a run's progress, cancel it, retry it from a step."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import StreamingResponse

from docpipe import statuses
from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.pipelines.model import NAME_PATTERN
from docpipe.state import reviews, runs
from docpipe.state.admission import admit_after_commit
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox
from docpipe.state.tenants import api_key_is_active
from docpipe.statuses import DecisionAction, Lane
from docpipe_api.deps import (
    ApiKeyIdDep,
    BrokerDep,
    DatabaseDep,
    PipelinesDep,
    SettingsDep,
    StreamSlotsDep,
    TenantDep,
)
from docpipe_api.errors import error_responses
from docpipe_api.links import follow
from docpipe_api.schemas import UUID_PATTERN, RunStatus, RunStatusList
from docpipe_api.streams import StreamSlot, StreamSlots

__all__ = ["router"]

router = APIRouter(tags=["runs"])

POLL_INTERVAL_S = 0.5
# The schema of each event of the stream (keepalive comments are not events).
_SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"enum": ["progress", "end", "reconnect", "revoked"]},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "progress, end: the run's status as GET /runs/{run_id} gives it "
            '(\'progress\': without the result); reconnect, revoked: {"detail": "..."}',
        },
    },
    "required": ["event", "data"],
}
KEEPALIVE_INTERVAL_S = 15.0
# A revoked key's open streams end within this long (one indexed read per stream).
KEY_CHECK_INTERVAL_S = 2.0
# Streams end by themselves within DOCPIPE_EVENT_STREAM_MAX_S; a slot may free sooner.
_STREAMS_FULL_RETRY_AFTER_S = 10


# Runs whose step outputs are shown: the result once done, the values with their evidence
# also in review (what a reviewer checks).
_WITH_OUTPUT = (statuses.RunStatus.DONE, statuses.RunStatus.NEEDS_REVIEW)


def run_status(db: Database, tenant: str, run_id: str) -> RunStatus:
    """The run's status body; the result (step outputs) only once it is done, the values
    with their evidence once it is done or needs review. One read: a poll of a run still
    going does not carry its outputs out of the database."""
    return RunStatus.model_validate(runs.run_progress(db, tenant, run_id, outputs_of=_WITH_OUTPUT))


MAX_RUN_IDS = 100
_RUN_IDS = re.compile(f"^{UUID_PATTERN}(,{UUID_PATTERN}){{0,{MAX_RUN_IDS - 1}}}$")


@router.get(
    "/runs",
    response_model=RunStatusList,
    summary=f"Several runs' status in one request (at most {MAX_RUN_IDS} ids)",
    responses=error_responses(422, 503),
)
def read_runs(
    ids: Annotated[
        str,
        Query(
            description=f"run ids, comma-separated, at most {MAX_RUN_IDS}; ids of no run of "
            "this tenant are left out of the answer",
            json_schema_extra={"pattern": _RUN_IDS.pattern},
        ),
    ],
    db: DatabaseDep,
    tenant: TenantDep,
) -> RunStatusList:
    """Each run as GET /runs/{run_id} gives it, in the order asked: a client following many
    runs (``docpipe watch``) makes one request where it would make one per run."""
    if not _RUN_IDS.fullmatch(ids):
        count = ids.count(",") + 1
        raise InvalidRequestError(
            f"ids: {count} ids, at most {MAX_RUN_IDS} are read at once"
            if count > MAX_RUN_IDS
            else "ids: run ids (UUIDs) separated by commas, without spaces"
        )
    found = runs.runs_progress(db, tenant, ids.split(","), outputs_of=_WITH_OUTPUT)
    return RunStatusList(runs=[RunStatus.model_validate(p) for p in found])


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
    responses={
        200: follow("run_id", "run_id", "read_run", "retry_run"),
        **error_responses(404, 409, 422, 503),
    },
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
    responses={
        202: follow("run_id", "run_id", "read_run", "cancel_run", "stream_run_events"),
        **error_responses(404, 409, 422, 503),
    },
)
def retry_run(
    run_id: str,
    db: DatabaseDep,
    broker: BrokerDep,
    pipelines: PipelinesDep,
    settings: SettingsDep,
    tenant: TenantDep,
    key_id: ApiKeyIdDep,
    from_step: Annotated[
        str | None,
        Query(
            pattern=NAME_PATTERN,
            description="a step name (a malformed one: 422; one the run's pipeline lacks: "
            "409); default: the run's first step not done",
        ),
    ] = None,
) -> RunStatus:
    """A run awaiting review is retried as a reviewer's decision would retry it (and the
    decision is recorded in its audit trail)."""
    review = runs.run_progress(db, tenant, run_id).review
    if review is not None:
        retry = reviews.DecisionRequest(
            revision=review["revision"], action=DecisionAction.RETRY, from_step=from_step
        )
        models = settings.provider_table.models
        decided = reviews.decide(db, tenant, run_id, retry, reviewer=reviews.Reviewer(key_id),
                                 pipelines=pipelines, models=models)  # fmt: skip
        outbox_ids = decided.outbox_ids
    else:
        restart = runs.restart_run(db, tenant, run_id, from_step, pipelines=pipelines)
        outbox_ids = restart.outbox_ids
    publish_outbox(db, broker, outbox_ids)
    status = run_status(db, tenant, run_id)
    if status.lane == Lane.BATCH:
        # It waits in PostgreSQL like a new batch run: admitted now if the window has room.
        admit_after_commit(db, broker, settings)
        status = run_status(db, tenant, run_id)
    return status


@router.get(
    "/runs/{run_id}/events",
    response_class=StreamingResponse,
    summary="Server-Sent Events: 'progress' on every change, then 'end' with the final status",
    responses={
        200: {
            "description": "An event stream that closes once the run has ended ('end'), after "
            "DOCPIPE_EVENT_STREAM_MAX_S ('reconnect': open a new one to go on), or once the "
            "API key is revoked ('revoked')",
            "content": {"text/event-stream": {"schema": _SSE_EVENT}},
        },
        **error_responses(404, 422, 429, 503),
    },
)
def stream_run_events(
    run_id: str,
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    slots: StreamSlotsDep,
    key_id: ApiKeyIdDep,
    tenant: TenantDep,
) -> StreamingResponse:
    first = runs.run_progress(db, tenant, run_id)  # unknown runs are a 404, not an empty stream
    slot = slots.open(f"key:{key_id}" if key_id else f"tenant:{tenant}")
    if slot is None:
        raise HTTPException(
            429,
            f"{'this API key' if key_id else 'this tenant'} has {slots.limit} event streams "
            f"open, the most it may (DOCPIPE_EVENT_STREAMS_PER_KEY); close one first",
            headers={"Retry-After": str(_STREAMS_FULL_RETRY_AFTER_S)},
        )
    watch = _Watch(db, tenant, key_id, slots, slot, settings.event_stream_max_s)
    return StreamingResponse(
        _progress_events(request, watch, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@dataclass(frozen=True)
class _Watch:
    """What one open stream is bound by: its slot, its key and its end."""

    db: Database
    tenant: str
    key_id: str | None
    slots: StreamSlots
    slot: StreamSlot
    max_s: float

    def key_still_valid(self) -> bool:
        """Whether the stream's key is still valid; renews the stream's slot too."""
        self.slots.renew(self.slot)
        return self.key_id is None or api_key_is_active(self.db, self.key_id)


def _event(name: str, body: RunStatus) -> str:
    return f"event: {name}\ndata: {body.model_dump_json(exclude={'result', 'values'})}\n\n"


def _notice(name: str, detail: str) -> str:
    return f"event: {name}\ndata: {json.dumps({'detail': detail})}\n\n"


async def _progress_events(
    request: Request, watch: _Watch, progress: runs.Progress
) -> AsyncIterator[str]:
    read = partial(runs.run_progress, watch.db, watch.tenant, progress.run_id)
    last_seen: tuple[object, ...] | None = None
    started = last_sent = last_checked = time.monotonic()
    try:
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
            if time.monotonic() - started >= watch.max_s:
                yield _notice("reconnect", f"this stream lasted the most a stream may "
                              f"({watch.max_s:g} s); open a new one to go on")  # fmt: skip
                return
            if time.monotonic() - last_checked >= KEY_CHECK_INTERVAL_S:
                if not await anyio.to_thread.run_sync(watch.key_still_valid):
                    yield _notice("revoked", "the API key of this stream was revoked")
                    return
                last_checked = time.monotonic()
            progress = await anyio.to_thread.run_sync(read)
        final = await anyio.to_thread.run_sync(run_status, watch.db, watch.tenant, progress.run_id)
        yield f"event: end\ndata: {final.model_dump_json()}\n\n"
    finally:
        # Also when the client went away and this generator is being cancelled.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(watch.slots.close, watch.slot)
