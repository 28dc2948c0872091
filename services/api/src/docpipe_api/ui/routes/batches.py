"""A batch's page: runs per status, cost, ETA and its runs as they finish (refreshed by the
page's script from ``/progress``), with the cancel the API allows, and its results as the
API's export streams them (CSV or JSON lines)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from docpipe import statuses
from docpipe_api.deps import DatabaseDep, ExportSlotsDep, PipelinesDep, RedisDep
from docpipe_api.routes import batches as api
from docpipe_api.routes import results as results_api
from docpipe_api.ui.deps import UiTenantDep
from docpipe_api.ui.pages import go_to, render

__all__ = ["router"]

router = APIRouter()

RUNS_PER_PAGE = 100
# The filter form sends "status=" for "all".
StatusFilter = Annotated[statuses.RunStatus | Literal[""], Query()]
After = Annotated[uuid.UUID | None, Query()]


@router.get("/batches")
def find_batch(
    request: Request, batch_id: Annotated[str, Query(min_length=1, max_length=100)]
) -> Response:
    """The home page's "open a batch" form."""
    return go_to(request, f"/batches/{quote(batch_id.strip(), safe='')}")


def _progress(
    db: DatabaseDep, tenant: str, batch_id: str, status: str, after: uuid.UUID | None
) -> dict[str, Any]:
    batch = api.read_batch(batch_id, db, tenant)
    wanted = statuses.RunStatus(status) if status else None
    page = api.list_batch_runs(batch_id, db, tenant, wanted, after, RUNS_PER_PAGE)
    return {"batch": batch, "runs": page.runs, "next_after": page.next_after}


@router.get("/batches/{batch_id}")
def batch_page(
    request: Request,
    batch_id: str,
    db: DatabaseDep,
    tenant: UiTenantDep,
    status: StatusFilter = "",
    after: After = None,
) -> Response:
    return render(request, "batch.html", {
        **_progress(db, tenant, batch_id, status, after),
        "status_filter": status,
        "statuses": list(statuses.RunStatus),
        "running": statuses.BatchStatus.RUNNING,
    })  # fmt: skip


@router.get("/batches/{batch_id}/progress")
def batch_progress(
    batch_id: str,
    db: DatabaseDep,
    tenant: UiTenantDep,
    status: StatusFilter = "",
    after: After = None,
) -> JSONResponse:
    """What the page's script refreshes the counts and the runs table from."""
    found = _progress(db, tenant, batch_id, status, after)
    return JSONResponse({
        "batch": found["batch"].model_dump(mode="json"),
        "runs": [r.model_dump(mode="json") for r in found["runs"]],
    })  # fmt: skip


@router.post("/batches/{batch_id}/cancel")
def cancel_batch(
    request: Request, batch_id: str, db: DatabaseDep, broker_redis: RedisDep, tenant: UiTenantDep
) -> Response:
    api.cancel_batch(batch_id, db, broker_redis, tenant)
    return go_to(request, f"/batches/{batch_id}")


@router.get("/batches/{batch_id}/results")
def batch_results(
    batch_id: str,
    db: DatabaseDep,
    pipelines: PipelinesDep,
    slots: ExportSlotsDep,
    tenant: UiTenantDep,
    format: Literal["jsonl", "csv"] = "jsonl",
) -> StreamingResponse:
    """GET /batches/{id}/results for the page's download links (a browser sends the
    session cookie, never a bearer token): the same export, bounds and tenant."""
    response = results_api.export_batch_results(batch_id, db, pipelines, slots, tenant, format)
    # A download with its name, in both formats (the API names the CSV only).
    response.headers.setdefault(
        "Content-Disposition", f'attachment; filename="batch-{batch_id}.{format}"'
    )
    return response
