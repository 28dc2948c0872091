"""Finding past work: a page of the caller's runs or batches, newest first, with filters
(docpipe.state.lists); and the home page's figures."""

from __future__ import annotations

from datetime import UTC, datetime

from docpipe.state import lists
from docpipe_api.list_schemas import BatchPage, RunPage
from docpipe_api.resources import Caller, Resources

__all__ = ["dashboard", "list_batches", "list_runs"]


def list_runs(
    *,
    resources: Resources,
    caller: Caller,
    filters: lists.RunFilters,
    cursor: str | None,
    limit: int,
) -> RunPage:
    """The caller's runs that ``filters`` hold, newest first, after ``cursor``;
    InvalidRequestError for a filter, cursor or limit that is not one."""
    page = lists.list_runs(resources.database, caller.tenant, filters, cursor=cursor, limit=limit)
    return RunPage.model_validate(page, from_attributes=True)


def list_batches(
    *,
    resources: Resources,
    caller: Caller,
    filters: lists.BatchFilters,
    cursor: str | None,
    limit: int,
) -> BatchPage:
    """The caller's batches that ``filters`` hold, newest first, after ``cursor``, each
    with its runs by status and its cost so far."""
    db = resources.database
    page = lists.list_batches(db, caller.tenant, filters, cursor=cursor, limit=limit)
    return BatchPage.model_validate(page, from_attributes=True)


def dashboard(*, resources: Resources, caller: Caller) -> lists.Dashboard:
    """The caller's home page: recent batches and runs, runs by status, the review backlog."""
    return lists.dashboard(resources.database, caller.tenant, now=datetime.now(UTC))
