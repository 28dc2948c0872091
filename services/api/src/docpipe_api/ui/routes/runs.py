"""The runs' list (newest first, found by document name, status, pipeline, batch) and a
run's page: status, steps, cost and values, live over the API's own event stream, with
the cancel and retry the API allows, through the same actions (docpipe_api.actions) and
as the signed-in caller."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from docpipe.errors import InvalidRequestError
from docpipe.pipelines.model import NAME_PATTERN
from docpipe.state import lists
from docpipe.statuses import ENDED_RUN_STATUSES, RunStatus
from docpipe_api import actions
from docpipe_api.deps import ResourcesDep
from docpipe_api.ui.deps import FormDep, UiCallerDep
from docpipe_api.ui.pages import go_to, render

__all__ = ["router"]

router = APIRouter()

RUNS_PER_PAGE = 50


Filter = Annotated[str, Query(max_length=200)]


@router.get("/runs")
def runs_page(
    request: Request,
    resources: ResourcesDep,
    caller: UiCallerDep,
    document: Filter = "",
    status: Filter = "",
    pipeline: Filter = "",
    batch_id: Filter = "",
    created_after: Filter = "",
    cursor: Filter = "",
    run_id: Filter = "",
) -> Response:
    """The tenant's runs, newest first, found by document name, status, pipeline or batch
    (an empty filter meaning "any"); ``run_id`` opens that run."""
    if run_id.strip():
        return go_to(request, f"/runs/{quote(run_id.strip(), safe='')}")
    filters = {
        "document": document.strip(),
        "status": status,
        "pipeline": pipeline,
        "batch_id": batch_id.strip(),
        "created_after": created_after,
    }
    page = actions.list_runs(
        resources=resources,
        caller=caller,
        filters=lists.RunFilters(
            status=status or None,
            pipeline=pipeline or None,
            batch_id=filters["batch_id"] or None,
            document=filters["document"] or None,
            created_from=_time(created_after, "created_after"),
        ),
        cursor=cursor or None,
        limit=RUNS_PER_PAGE,
    )
    return render(
        request,
        "runs.html",
        {
            "runs": page.runs,
            "next_cursor": page.next_cursor,
            "next_query": urlencode({**filters, "cursor": page.next_cursor or ""}),
            "filters": filters,
            "statuses": list(RunStatus),
            "pipelines": sorted(resources.pipelines.by_key),
        },
    )


def _time(text: str, name: str) -> datetime | None:
    """An ISO 8601 time with its zone, or None for an empty filter."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequestError(f"{name}: a time such as 2026-12-01T09:00:00+00:00") from None
    if at.tzinfo is None:
        raise InvalidRequestError(f"{name}: give a time zone (2026-12-01T09:00:00+00:00)")
    return at


@router.get("/runs/{run_id}")
def run_page(
    request: Request, run_id: str, resources: ResourcesDep, caller: UiCallerDep
) -> Response:
    run = actions.run_status(resources=resources, caller=caller, run_id=run_id)
    return render(
        request,
        "run.html",
        {
            "run": run,
            "active": run.status not in ENDED_RUN_STATUSES,
            "step_names": [s.step for s in run.steps],
        },
    )


@router.get("/runs/{run_id}/events")
def run_events(
    run_id: str, request: Request, resources: ResourcesDep, caller: UiCallerDep
) -> StreamingResponse:
    """GET /runs/{id}/events for the page's script (a browser's EventSource sends the
    session cookie, never a bearer token): the same stream, slots and key checks."""
    return actions.run_events(
        resources=resources, caller=caller, run_id=run_id, disconnected=request.is_disconnected
    )


@router.post("/runs/{run_id}/cancel")
def cancel_run(
    request: Request, run_id: str, resources: ResourcesDep, caller: UiCallerDep
) -> Response:
    actions.cancel_run(resources=resources, caller=caller, run_id=run_id)
    return _back_to(request, run_id)


@router.post("/runs/{run_id}/retry")
def retry_run(
    request: Request, run_id: str, form: FormDep, resources: ResourcesDep, caller: UiCallerDep
) -> Response:
    from_step = form.get("from_step") or None
    if from_step is not None and not re.fullmatch(NAME_PATTERN, from_step):
        raise InvalidRequestError("from_step: a step name (lower-case letters, digits and '_')")
    actions.retry_run(resources=resources, caller=caller, run_id=run_id, from_step=from_step)
    return _back_to(request, run_id)


def _back_to(request: Request, run_id: str) -> Response:
    return go_to(request, f"/runs/{run_id}")
