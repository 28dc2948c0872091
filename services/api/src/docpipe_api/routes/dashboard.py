"""GET /dashboard: the tenant's work at a glance, the figures of the web pages' home for
scripts and the CLI (``docpipe dashboard``); every figure read from an index, whatever
the history (docpipe.state.lists)."""

from __future__ import annotations

from fastapi import APIRouter

from docpipe_api import actions
from docpipe_api.deps import CallerDep, ResourcesDep
from docpipe_api.errors import error_responses
from docpipe_api.list_schemas import Dashboard

__all__ = ["router"]

router = APIRouter(tags=["dashboard"])


@router.get(
    "/dashboard",
    response_model=Dashboard,
    summary="Runs by status, the review backlog, the newest batches and runs",
    responses=error_responses(503),
)
def read_dashboard(resources: ResourcesDep, caller: CallerDep) -> Dashboard:
    home = actions.dashboard(resources=resources, caller=caller)
    return Dashboard.model_validate(home, from_attributes=True)
