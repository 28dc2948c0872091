"""A run's page: status, steps, cost and values, live over the API's own event stream, with
the cancel and retry the API allows. Each action is the API route's function, called with
the signed-in tenant."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from docpipe.errors import InvalidRequestError
from docpipe.pipelines.model import NAME_PATTERN
from docpipe.statuses import ENDED_RUN_STATUSES
from docpipe_api.deps import (
    ApiKeyIdDep,
    BrokerDep,
    DatabaseDep,
    PipelinesDep,
    SettingsDep,
    StreamSlotsDep,
)
from docpipe_api.routes import runs as api
from docpipe_api.ui.deps import FormDep, UiTenantDep
from docpipe_api.ui.pages import go_to, render

__all__ = ["router"]

router = APIRouter()


@router.get("/runs")
def find_run(
    request: Request, run_id: Annotated[str, Query(min_length=1, max_length=100)]
) -> Response:
    """The home page's "open a run" form."""
    return go_to(request, f"/runs/{quote(run_id.strip(), safe='')}")


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str, db: DatabaseDep, tenant: UiTenantDep) -> Response:
    run = api.run_status(db, tenant, run_id)
    return render(request, "run.html", {
        "run": run,
        "active": run.status not in ENDED_RUN_STATUSES,
        "step_names": [s.step for s in run.steps],
    })  # fmt: skip


@router.get("/runs/{run_id}/events")
def run_events(
    run_id: str,
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    slots: StreamSlotsDep,
    key_id: ApiKeyIdDep,
    tenant: UiTenantDep,
) -> StreamingResponse:
    """GET /runs/{id}/events for the page's script (a browser's EventSource sends the
    session cookie, never a bearer token): the same stream, slots and key checks."""
    return api.stream_run_events(run_id, request, db, settings, slots, key_id, tenant)


@router.post("/runs/{run_id}/cancel")
def cancel_run(request: Request, run_id: str, db: DatabaseDep, tenant: UiTenantDep) -> Response:
    api.cancel_run(run_id, db, tenant)
    return _back_to(request, run_id)


@router.post("/runs/{run_id}/retry")
def retry_run(
    request: Request,
    run_id: str,
    form: FormDep,
    db: DatabaseDep,
    broker: BrokerDep,
    pipelines: PipelinesDep,
    settings: SettingsDep,
    tenant: UiTenantDep,
) -> Response:
    from_step = form.get("from_step") or None
    if from_step is not None and not re.fullmatch(NAME_PATTERN, from_step):
        raise InvalidRequestError("from_step: a step name (lower-case letters, digits and '_')")
    api.retry_run(run_id, db, broker, pipelines, settings, tenant, from_step)
    return _back_to(request, run_id)


def _back_to(request: Request, run_id: str) -> Response:
    return go_to(request, f"/runs/{run_id}")
