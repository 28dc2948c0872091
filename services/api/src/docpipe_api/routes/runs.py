"""Runs: poll or stream a run's progress, cancel it, retry it from a step."""

from __future__ import annotations

import re
import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from docpipe import statuses
from docpipe.errors import InvalidRequestError
from docpipe.pipelines.model import NAME_PATTERN
from docpipe.state import lists
from docpipe.state.cursors import CURSOR_PATTERN
from docpipe_api import actions
from docpipe_api.deps import CallerDep, ResourcesDep
from docpipe_api.errors import error_responses
from docpipe_api.links import follow
from docpipe_api.list_schemas import IsoTime, RunPage
from docpipe_api.schemas import DOCUMENT_ID_ECMA, UUID_PATTERN, RunStatusListOut, RunStatusOut

__all__ = ["router"]

router = APIRouter(tags=["runs"])

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
MAX_RUN_IDS = 100
_RUN_IDS = re.compile(f"^{UUID_PATTERN}(,{UUID_PATTERN}){{0,{MAX_RUN_IDS - 1}}}$")


@router.get(
    "/runs",
    response_model=RunPage | RunStatusListOut,
    summary="The tenant's runs, newest first, with filters; or several runs' status by id",
    responses=error_responses(422, 503),
)
def read_runs(
    resources: ResourcesDep,
    caller: CallerDep,
    ids: Annotated[
        str | None,
        Query(
            description=f"run ids, comma-separated, at most {MAX_RUN_IDS}: each run as GET "
            "/runs/{run_id} gives it, in the order asked (ids of no run of this tenant, and "
            "runs the filters leave out, are left out); cursor and limit are for lists "
            "without ids",
            json_schema_extra={"pattern": _RUN_IDS.pattern},
        ),
    ] = None,
    status: Annotated[
        statuses.RunStatus | None,
        Query(description="only runs in it (needs_review: those awaiting a person)"),
    ] = None,
    pipeline: Annotated[
        str | None, Query(pattern=lists.PIPELINE_KEY_PATTERN, description="a key: name:vN")
    ] = None,
    batch_id: Annotated[uuid.UUID | None, Query(description="only this batch's runs")] = None,
    document: Annotated[
        str | None,
        Query(
            pattern=DOCUMENT_ID_ECMA,
            description="a document id (its name as it was sent), or the start of one",
        ),
    ] = None,
    created_after: Annotated[IsoTime | None, Query(description="inclusive")] = None,
    created_before: Annotated[IsoTime | None, Query(description="exclusive")] = None,
    cursor: Annotated[
        str | None, Query(pattern=CURSOR_PATTERN, description="next_cursor of the page before")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=lists.MAX_RUN_PAGE)] = 50,
) -> RunPage | RunStatusListOut:
    """Without ``ids``: a page of the tenant's runs, newest first, each page read from an
    index whatever the tenant's history (``next_cursor`` for the next). With ``ids``: each
    run as GET /runs/{run_id} gives it, in the order asked (those the filters hold): a
    client following many runs (``docpipe watch``) makes one request where it would make
    one per run."""
    filters = lists.RunFilters(
        status=status,
        pipeline=pipeline,
        batch_id=str(batch_id) if batch_id else None,
        document=document,
        created_from=created_after,
        created_to=created_before,
    )
    if ids is None:
        return actions.list_runs(
            resources=resources, caller=caller, filters=filters, cursor=cursor, limit=limit
        )
    if not _RUN_IDS.fullmatch(ids):
        count = ids.count(",") + 1
        raise InvalidRequestError(
            f"ids: {count} ids, at most {MAX_RUN_IDS} are read at once"
            if count > MAX_RUN_IDS
            else "ids: run ids (UUIDs) separated by commas, without spaces"
        )
    found = actions.runs_status(
        resources=resources, caller=caller, run_ids=ids.split(","), filters=filters
    )
    return RunStatusListOut(runs=found)


@router.get(
    "/runs/{run_id}",
    response_model=RunStatusOut,
    summary="A run's status, steps, cost and (once done) result and values with evidence",
    responses=error_responses(404, 422, 503),
)
def read_run(run_id: str, resources: ResourcesDep, caller: CallerDep) -> RunStatusOut:
    return actions.run_status(resources=resources, caller=caller, run_id=run_id)


@router.post(
    "/runs/{run_id}/cancel",
    response_model=RunStatusOut,
    summary="Stop a run; no further steps start",
    responses={
        200: follow("run_id", "run_id", "read_run", "retry_run"),
        **error_responses(404, 409, 422, 503),
    },
)
def cancel_run(run_id: str, resources: ResourcesDep, caller: CallerDep) -> RunStatusOut:
    return actions.cancel_run(resources=resources, caller=caller, run_id=run_id)


@router.post(
    "/runs/{run_id}/retry",
    status_code=202,
    response_model=RunStatusOut,
    summary="Reopen an ended run at a step, keeping the finished steps before it",
    responses={
        202: follow("run_id", "run_id", "read_run", "cancel_run", "stream_run_events"),
        **error_responses(404, 409, 422, 503),
    },
)
def retry_run(
    run_id: str,
    resources: ResourcesDep,
    caller: CallerDep,
    from_step: Annotated[
        str | None,
        Query(
            pattern=NAME_PATTERN,
            description="a step name (a malformed one: 422; one the run's pipeline lacks: "
            "409); default: the run's first step not done",
        ),
    ] = None,
) -> RunStatusOut:
    """A run awaiting review is retried as a reviewer's decision would retry it (and the
    decision is recorded in its audit trail)."""
    return actions.retry_run(resources=resources, caller=caller, run_id=run_id, from_step=from_step)


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
    run_id: str, request: Request, resources: ResourcesDep, caller: CallerDep
) -> StreamingResponse:
    return actions.run_events(
        resources=resources, caller=caller, run_id=run_id, disconnected=request.is_disconnected
    )
