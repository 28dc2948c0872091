"""Finding past work: a tenant's runs and batches, newest first, a page at a time, with
filters; and what the web pages' home shows (recent batches and runs, runs per status, the
review backlog).

Every list reads its page from an index in order (migration 0060) and pages by a keyset
cursor (docpipe.state.cursors), so a page costs the same at a tenant's first run and at
its millionth (runs by a document prefix: a bounded walk in time order, else the prefix's
index entries alone, list_runs_by_document); the counts stop at a cap instead of counting
a whole history. The filters are checked here, once, for the API, the CLI and the web
pages alike.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from docpipe.errors import InvalidRequestError
from docpipe.pipelines.model import NAME_PATTERN
from docpipe.state.cursors import read_cursor, write_cursor
from docpipe.state.db import Database
from docpipe.state.runs import Progress
from docpipe.statuses import ACTIVE_RUN_STATUSES, BatchStatus, RunStatus

__all__ = [
    "COUNT_CAP",
    "DOCUMENT_WALK_PER_RUN",
    "MAX_BATCH_PAGE",
    "MAX_DOCUMENT_PREFIX",
    "MAX_RUN_PAGE",
    "PIPELINE_KEY_PATTERN",
    "BatchFilters",
    "BatchPage",
    "BatchSummary",
    "Dashboard",
    "RunFilters",
    "RunPage",
    "RunSummary",
    "batch_list_query",
    "dashboard",
    "list_batches",
    "list_runs",
    "run_list_query",
]

MAX_RUN_PAGE = 200
MAX_BATCH_PAGE = 100
MAX_DOCUMENT_PREFIX = 128  # a document id's length (docpipe.state.documents.DOCUMENT_ID)
# A count past this is shown as "at least": it costs an index-only scan of this many entries.
COUNT_CAP = 10_000
# A page of runs by document prefix first walks this many of the tenant's runs per run it
# lists, newest first (list_runs_by_document): a prefix one run in 20 has is found so.
DOCUMENT_WALK_PER_RUN = 20
PIPELINE_KEY_PATTERN = NAME_PATTERN.removesuffix("$") + ":v[1-9][0-9]{0,8}$"
_REVIEW_WAITING = (RunStatus.NEEDS_REVIEW,)


@dataclass(frozen=True)
class RunSummary:
    """A run as a list shows it (GET /runs/{id} has the rest)."""

    run_id: str
    pipeline: str
    document_id: str
    batch_id: str | None
    lane: str
    status: str
    current_step: str | None  # while it is queued or running
    steps_done: int
    steps_total: int
    cost_so_far_usd: Decimal
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    waiting_since: datetime | None  # while it awaits a person


@dataclass(frozen=True)
class RunFilters:
    """Which runs a list holds; every filter left None holds all."""

    status: str | None = None
    pipeline: str | None = None
    batch_id: str | None = None
    document: str | None = None  # a document id, or the start of one
    created_from: datetime | None = None  # inclusive
    created_to: datetime | None = None  # exclusive

    def holds(self, run: RunSummary | Progress) -> bool:
        """Whether ``run`` is one these (checked) filters hold."""
        return (
            self.status in (None, run.status)
            and self.pipeline in (None, run.pipeline)
            and self.batch_id in (None, run.batch_id)
            and (self.document is None or run.document_id.startswith(self.document))
            and (self.created_from is None or run.created_at >= self.created_from)
            and (self.created_to is None or run.created_at < self.created_to)
        )

    def checked(self) -> RunFilters:
        """The filters, each checked (InvalidRequestError naming the one that is wrong)."""
        if self.status is not None and self.status not in tuple(RunStatus):
            raise InvalidRequestError(
                f"status: {self.status[:50]!r} is not a run status (one of {', '.join(RunStatus)})"
            )
        if self.document is not None and not 1 <= len(self.document) <= MAX_DOCUMENT_PREFIX:
            raise InvalidRequestError(
                f"document: a document id or its start, 1-{MAX_DOCUMENT_PREFIX} characters"
            )
        _check_pipeline(self.pipeline)
        _check_range(self.created_from, self.created_to)
        return RunFilters(
            self.status,
            self.pipeline,
            _uuid(self.batch_id, "batch_id"),
            self.document,
            self.created_from,
            self.created_to,
        )


@dataclass(frozen=True)
class RunPage:
    runs: list[RunSummary]
    next_cursor: str | None  # None: this is the last page


def list_runs(
    db: Database,
    tenant_id: str,
    filters: RunFilters = RunFilters(),
    *,
    cursor: str | None = None,
    limit: int = 50,
) -> RunPage:
    """The tenant's runs that ``filters`` hold, newest first, ``limit`` at a time after
    ``cursor`` (the page before's ``next_cursor``)."""
    _check_limit(limit, MAX_RUN_PAGE)
    query, params = run_list_query(tenant_id, filters.checked(), cursor, limit + 1)
    rows = db.search_as(RunSummary, query, **params)
    last = rows[limit - 1] if len(rows) > limit else None
    return RunPage(rows[:limit], write_cursor(last.created_at, last.run_id) if last else None)


@dataclass(frozen=True)
class BatchSummary:
    """A batch as a list shows it: its runs counted by status, its cost so far."""

    batch_id: str
    pipeline: str
    status: str
    runs_total: int
    cost_so_far_usd: Decimal
    budget_usd: Decimal | None
    created_at: datetime
    finished_at: datetime | None
    runs_by_status: dict[str, int]

    @property
    def runs_ended(self) -> int:
        """Runs that will not move without a person or a retry (done, failed, in review...)."""
        return sum(n for s, n in self.runs_by_status.items() if s not in ACTIVE_RUN_STATUSES)

    @property
    def runs_in_review(self) -> int:
        return self.runs_by_status.get(RunStatus.NEEDS_REVIEW, 0)


@dataclass(frozen=True)
class BatchFilters:
    """Which batches a list holds; every filter left unset holds all."""

    status: str | None = None
    pipeline: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    needs_review: bool = False  # only batches with runs awaiting a person

    def checked(self) -> BatchFilters:
        if self.status is not None and self.status not in tuple(BatchStatus):
            raise InvalidRequestError(
                f"status: {self.status[:50]!r} is not a batch status "
                f"(one of {', '.join(BatchStatus)})"
            )
        _check_pipeline(self.pipeline)
        _check_range(self.created_from, self.created_to)
        return self


@dataclass(frozen=True)
class BatchPage:
    batches: list[BatchSummary]
    next_cursor: str | None


def list_batches(
    db: Database,
    tenant_id: str,
    filters: BatchFilters = BatchFilters(),
    *,
    cursor: str | None = None,
    limit: int = 20,
) -> BatchPage:
    """The tenant's batches that ``filters`` hold, newest first, ``limit`` at a time after
    ``cursor``, each with its runs counted by status."""
    _check_limit(limit, MAX_BATCH_PAGE)
    query = batch_list_query(tenant_id, filters.checked(), cursor, limit + 1)
    rows = db.search_as(BatchSummary, "list_batches", **query)
    last = rows[limit - 1] if len(rows) > limit else None
    return BatchPage(rows[:limit], write_cursor(last.created_at, last.batch_id) if last else None)


@dataclass(frozen=True)
class Dashboard:
    """A tenant's home page: what is going on, what ended lately, what waits for a person."""

    batches: list[BatchSummary]  # the most recent
    runs: list[RunSummary]  # the most recent
    # Runs per status: queued, running and awaiting a person whenever they started, the
    # ended ones started since ``ended_since``; a count of ``cap`` means at least that many.
    runs_by_status: dict[str, int]
    ended_since: datetime
    review_waiting: int  # runs awaiting a person (``cap``: at least)
    review_oldest_since: datetime | None
    cap: int


def dashboard(
    db: Database,
    tenant_id: str,
    *,
    now: datetime,
    recent_batches: int = 5,
    recent_runs: int = 10,
    ended_within: timedelta = timedelta(hours=24),
    cap: int = COUNT_CAP,
) -> Dashboard:
    """The tenant's home page in four queries on one connection, each bounded whatever
    its history: two pages from their indexes, runs per status counted up to ``cap``, and
    the review queue's length (up to ``cap``) and oldest entry."""
    since = now - ended_within
    statuses = list(RunStatus)
    sinces = [
        datetime.min.replace(tzinfo=now.tzinfo)
        if s in (*ACTIVE_RUN_STATUSES, *_REVIEW_WAITING)
        else since
        for s in statuses
    ]
    with db.session() as s:
        batches = s.search_as(
            BatchSummary,
            "list_batches",
            **batch_list_query(tenant_id, BatchFilters(), None, recent_batches),
        )
        query, params = run_list_query(tenant_id, RunFilters(), None, recent_runs)
        runs = s.search_as(RunSummary, query, **params)
        counts = s.all(
            "run_counts",
            tenant_id=tenant_id,
            statuses=[str(st) for st in statuses],
            sinces=sinces,
            cap=cap,
        )
        backlog = s.one("review_backlog", tenant_id=tenant_id, cap=cap)
    assert backlog is not None
    return Dashboard(
        batches=batches,
        runs=runs,
        runs_by_status={row["status"]: row["runs"] for row in counts},
        ended_since=since,
        review_waiting=backlog["waiting"],
        review_oldest_since=backlog["oldest_since"],
        cap=cap,
    )


def run_list_query(
    tenant_id: str, f: RunFilters, cursor: str | None, limit: int
) -> tuple[str, Mapping[str, Any]]:
    """The named query ``list_runs`` sends for checked filters, and its parameters (also
    what a test or a benchmark EXPLAINs)."""
    after_at, after_id = read_cursor(cursor) if cursor else (None, None)
    params = {
        "tenant_id": tenant_id,
        "status": f.status,
        "pipeline": f.pipeline,
        "batch_id": f.batch_id,
        "created_from": f.created_from,
        "created_to": f.created_to,
        "after_at": after_at,
        "after_id": after_id,
        "limit": limit,
    }
    if f.document is None:
        return "list_runs", params
    return "list_runs_by_document", params | {
        "document_like": _like_prefix(f.document),
        "walk": DOCUMENT_WALK_PER_RUN * limit,
    }


def batch_list_query(
    tenant_id: str, f: BatchFilters, cursor: str | None, limit: int
) -> Mapping[str, Any]:
    """The parameters ``list_batches`` sends its query for checked filters."""
    after_at, after_id = read_cursor(cursor) if cursor else (None, None)
    return {
        "tenant_id": tenant_id,
        "status": f.status,
        "pipeline": f.pipeline,
        "created_from": f.created_from,
        "created_to": f.created_to,
        "needs_review": f.needs_review,
        "after_at": after_at,
        "after_id": after_id,
        "limit": limit,
    }


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for the strings that start with ``prefix`` (its own % and _ literal)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _check_pipeline(pipeline: str | None) -> None:
    if pipeline is not None and not re.fullmatch(PIPELINE_KEY_PATTERN, pipeline):
        raise InvalidRequestError(
            f"pipeline: {pipeline[:100]!r} is not a pipeline key such as document_extract:v1"
        )


def _check_range(start: datetime | None, end: datetime | None) -> None:
    """Times with their zone (a range that holds no time lists nothing)."""
    for name, at in (("created_after", start), ("created_before", end)):
        if at is not None and at.tzinfo is None:
            raise InvalidRequestError(f"{name}: give a time zone (2026-12-01T09:00:00Z)")


def _check_limit(limit: int, most: int) -> None:
    if not 1 <= limit <= most:
        raise InvalidRequestError(f"limit must be 1-{most}")


def _uuid(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidRequestError(f"{name}: {value[:100]!r} is not an id (a UUID)") from None
