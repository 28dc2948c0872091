"""What GET /runs and GET /batches answer when they list: a page of summaries, newest
first, and the cursor of the next page; and GET /dashboard, the web pages' home as data
(docpipe.state.lists)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

__all__ = ["BatchPage", "BatchSummary", "Dashboard", "IsoTime", "RunPage", "RunSummary"]

_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T")


def _iso_time(value: Any) -> Any:
    """An ISO 8601 date-time as the OpenAPI document says (pydantic alone would also take
    a number of seconds since the epoch)."""
    if not isinstance(value, str) or not _ISO_TIME.match(value):
        raise ValueError("an ISO 8601 time with its zone, such as 2026-12-01T09:00:00Z")
    return value


# A time in a query: ISO 8601 with its zone.
IsoTime = Annotated[AwareDatetime, BeforeValidator(_iso_time)]

_ANSWER = ConfigDict(from_attributes=True)
_NEXT = "pass as ?cursor= for the next page (the same filters); null: this is the last page"


class RunSummary(BaseModel):
    """A run as a list shows it; GET /runs/{run_id} has its steps, result and evidence."""

    model_config = _ANSWER

    run_id: str
    pipeline: str
    document_id: str = Field(description="the document's id: its name as it was sent")
    batch_id: str | None
    lane: str
    status: str
    current_step: str | None = Field(description="while the run is queued or running")
    steps_done: int
    steps_total: int
    cost_so_far_usd: float
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    waiting_since: datetime | None = Field(description="while it awaits a person")


class RunPage(BaseModel):
    runs: list[RunSummary] = Field(description="newest first")
    next_cursor: str | None = Field(description=_NEXT)


class BatchSummary(BaseModel):
    """A batch as a list shows it: its progress (runs by status) and cost so far."""

    model_config = _ANSWER

    batch_id: str
    pipeline: str
    status: str
    runs_total: int
    runs_by_status: dict[str, int]
    runs_ended: int = Field(
        description="runs done, failed, cancelled, expired, over budget "
        "or awaiting a person: those that will not move on their own"
    )
    runs_in_review: int = Field(description="runs awaiting a person")
    cost_so_far_usd: float
    budget_usd: float | None
    created_at: datetime
    finished_at: datetime | None


class BatchPage(BaseModel):
    batches: list[BatchSummary] = Field(description="newest first")
    next_cursor: str | None = Field(description=_NEXT)


class Dashboard(BaseModel):
    """A tenant's work at a glance, as its web pages' home shows it: runs by status, the
    review backlog, the newest batches and runs. Every count stops at ``cap``."""

    model_config = _ANSWER

    runs_by_status: dict[str, int] = Field(
        description="runs queued, running or awaiting a person, whenever they were created; "
        "runs of the ended statuses created since ended_since"
    )
    ended_since: datetime = Field(description="the ended runs counted were created since")
    review_waiting: int = Field(description="runs awaiting a person")
    review_oldest_since: datetime | None = Field(
        description="since when the run that has waited longest for a person waits"
    )
    cap: int = Field(description="a count this high means at least this many")
    batches: list[BatchSummary] = Field(description="the newest batches, newest first")
    runs: list[RunSummary] = Field(description="the newest runs, newest first")
