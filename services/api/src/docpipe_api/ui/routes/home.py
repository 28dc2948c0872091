"""The home page: what is going on for the signed-in tenant (recent batches with their
progress and cost, recent runs, runs by status, the review backlog and its oldest age) and
a search by document name; every figure read from an index, whatever the history
(docpipe.state.lists)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from docpipe.statuses import ACTIVE_RUN_STATUSES, ENDED_RUN_STATUSES, RunStatus
from docpipe_api import actions
from docpipe_api.deps import ResourcesDep
from docpipe_api.ui.deps import UiCallerDep
from docpipe_api.ui.pages import render

__all__ = ["counted", "router"]

router = APIRouter()


def counted(n: int, cap: int) -> str:
    """A count as the page shows it: "1,234", or "10,000+" once it reached the cap."""
    return f"{n:,}+" if n >= cap else f"{n:,}"


@router.get("/")
def home(request: Request, resources: ResourcesDep, caller: UiCallerDep) -> Response:
    home = actions.dashboard(resources=resources, caller=caller)
    return render(
        request,
        "home.html",
        {
            "home": home,
            "count": lambda status: counted(home.runs_by_status.get(status, 0), home.cap),
            "review_waiting": counted(home.review_waiting, home.cap),
            "active": list(ACTIVE_RUN_STATUSES),
            "ended": [s for s in ENDED_RUN_STATUSES if s != RunStatus.NEEDS_REVIEW],
            "ended_since": home.ended_since.isoformat(timespec="seconds"),
        },
    )
