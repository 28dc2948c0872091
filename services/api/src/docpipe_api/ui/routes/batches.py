"""The batches' list (newest first, with progress and cost) and a batch's page: runs per
status, cost, ETA and its runs as they finish (refreshed by the page's script from
``/progress``), with the cancel the API allows, and its results as the API's export
streams them (CSV or JSON lines)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from docpipe import statuses
from docpipe.state import lists
from docpipe_api import actions
from docpipe_api.deps import ResourcesDep
from docpipe_api.resources import Caller, Resources
from docpipe_api.ui.deps import UiCallerDep
from docpipe_api.ui.pages import go_to, render

__all__ = ["router"]

router = APIRouter()

RUNS_PER_PAGE = 100
# The filter form sends "status=" for "all".
StatusFilter = Annotated[statuses.RunStatus | Literal[""], Query()]
After = Annotated[uuid.UUID | None, Query()]


Filter = Annotated[str, Query(max_length=200)]
BATCHES_PER_PAGE = 25


@router.get("/batches")
def batches_page(
    request: Request,
    resources: ResourcesDep,
    caller: UiCallerDep,
    status: Filter = "",
    pipeline: Filter = "",
    needs_review: Filter = "",
    cursor: Filter = "",
    batch_id: Filter = "",
) -> Response:
    """The tenant's batches, newest first, with their progress and cost (an empty filter
    meaning "any"); ``batch_id`` opens that batch."""
    if batch_id.strip():
        return go_to(request, f"/batches/{quote(batch_id.strip(), safe='')}")
    filters = {"status": status, "pipeline": pipeline, "needs_review": needs_review}
    page = actions.list_batches(
        resources=resources,
        caller=caller,
        filters=lists.BatchFilters(
            status=status or None,
            pipeline=pipeline or None,
            needs_review=needs_review == "true",
        ),
        cursor=cursor or None,
        limit=BATCHES_PER_PAGE,
    )
    return render(
        request,
        "batches.html",
        {
            "batches": page.batches,
            "next_cursor": page.next_cursor,
            "next_query": urlencode({**filters, "cursor": page.next_cursor or ""}),
            "filters": filters,
            "statuses": list(statuses.BatchStatus),
            "pipelines": sorted(resources.pipelines.by_key),
        },
    )


def _progress(
    resources: Resources, caller: Caller, batch_id: str, status: str, after: uuid.UUID | None
) -> dict[str, Any]:
    batch = actions.batch_status(resources=resources, caller=caller, batch_id=batch_id)
    page = actions.batch_runs(
        resources=resources,
        caller=caller,
        batch_id=batch_id,
        status=statuses.RunStatus(status) if status else None,
        after=str(after) if after else None,
        limit=RUNS_PER_PAGE,
    )
    return {"batch": batch, "runs": page.runs, "next_after": page.next_after}


@router.get("/batches/{batch_id}")
def batch_page(
    request: Request,
    batch_id: str,
    resources: ResourcesDep,
    caller: UiCallerDep,
    status: StatusFilter = "",
    after: After = None,
) -> Response:
    return render(
        request,
        "batch.html",
        {
            **_progress(resources, caller, batch_id, status, after),
            "status_filter": status,
            "statuses": list(statuses.RunStatus),
            "running": statuses.BatchStatus.RUNNING,
        },
    )


@router.get("/batches/{batch_id}/progress")
def batch_progress(
    batch_id: str,
    resources: ResourcesDep,
    caller: UiCallerDep,
    status: StatusFilter = "",
    after: After = None,
) -> JSONResponse:
    """What the page's script refreshes the counts and the runs table from."""
    found = _progress(resources, caller, batch_id, status, after)
    return JSONResponse(
        {
            "batch": found["batch"].model_dump(mode="json"),
            "runs": [r.model_dump(mode="json") for r in found["runs"]],
        }
    )


@router.post("/batches/{batch_id}/cancel")
def cancel_batch(
    request: Request, batch_id: str, resources: ResourcesDep, caller: UiCallerDep
) -> Response:
    actions.cancel_batch(resources=resources, caller=caller, batch_id=batch_id)
    return go_to(request, f"/batches/{batch_id}")


@router.get("/batches/{batch_id}/results")
def batch_results(
    batch_id: str,
    resources: ResourcesDep,
    caller: UiCallerDep,
    format: Literal["jsonl", "csv", "xlsx"] = "jsonl",
    evidence: bool = False,
) -> StreamingResponse:
    """GET /batches/{id}/results for the page's download links (a browser sends the
    session cookie, never a bearer token): the same export, bounds and tenant."""
    response = actions.export_batch_results(
        resources=resources, caller=caller, batch_id=batch_id, format=format, evidence=evidence
    )
    # A download with its name, in both formats (the API names the CSV only).
    response.headers.setdefault(
        "Content-Disposition", f'attachment; filename="batch-{batch_id}.{format}"'
    )
    return response
