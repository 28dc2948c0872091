"""The review queue as a reviewer works through it: how many runs wait (by pipeline and kind
of reason, and since when the oldest), the queue in another order than oldest first (by
pipeline, by reason), and the review that comes next after a decision.

Each read is bounded by the queue's index, not by the tenant's history: counts stop at
:data:`COUNT_CAP` waiting runs, another order sorts the :data:`COUNT_CAP` oldest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from docpipe.errors import InvalidRequestError
from docpipe.state.db import Database
from docpipe.state.reviews import (
    MAX_PAGE,
    QueueFilter,
    ReviewPage,
    ReviewSummary,
    list_reviews,
    uuid_or_none,
)

__all__ = ["COUNT_CAP", "QueueCounts", "QueueOrder", "next_review", "queue_counts", "queue_page"]

COUNT_CAP = 10_000


class QueueOrder(StrEnum):
    """How the queue is sorted; each order keeps the oldest first within it."""

    OLDEST = "oldest"  # the longest waiting first (paged by a cursor)
    PIPELINE = "pipeline"  # by pipeline key
    REASON = "reason"  # by kind of reason


@dataclass(frozen=True)
class QueueCounts:
    """The queue's size with the filters that are set: in all, by pipeline, by kind of
    reason; ``capped`` when it holds more than :data:`COUNT_CAP` (counted up to that)."""

    waiting: int
    oldest_since: datetime | None
    by_pipeline: dict[str, int] = field(default_factory=dict)
    by_reason: dict[str, int] = field(default_factory=dict)
    capped: bool = False


def queue_counts(db: Database, tenant_id: str, where: QueueFilter) -> QueueCounts:
    """How many of the tenant's runs await a person (``where`` says which)."""
    by_pipeline: dict[str, int] = {}
    by_reason: dict[str, int] = {}
    oldest: datetime | None = None
    for row in db.all("review_queue_counts", cap=COUNT_CAP, **_filters(tenant_id, where)):
        by_pipeline[row["pipeline"]] = by_pipeline.get(row["pipeline"], 0) + row["runs"]
        reason = row["reason"] or "other"
        by_reason[reason] = by_reason.get(reason, 0) + row["runs"]
        if row["oldest_since"] is not None and (oldest is None or row["oldest_since"] < oldest):
            oldest = row["oldest_since"]
    waiting = sum(by_pipeline.values())
    return QueueCounts(waiting, oldest, by_pipeline, by_reason, capped=waiting >= COUNT_CAP)


def queue_page(
    db: Database,
    tenant_id: str,
    where: QueueFilter,
    order: QueueOrder = QueueOrder.OLDEST,
    *,
    cursor: str | None = None,
    limit: int = 50,
) -> ReviewPage:
    """A page of the queue in ``order``: oldest first a page at a time after ``cursor``;
    by pipeline or reason the first ``limit`` (no cursor: filter to see others)."""
    if order is QueueOrder.OLDEST:
        return list_reviews(db, tenant_id, where, cursor=cursor, limit=limit)
    if cursor is not None:
        raise InvalidRequestError("cursor: only the oldest-first queue is paged")
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequestError(f"limit must be 1-{MAX_PAGE}")
    rows = db.all_as(
        ReviewSummary,
        "list_reviews_sorted",
        order=str(order),
        scan=COUNT_CAP,
        limit=limit,
        **_filters(tenant_id, where),
    )
    return ReviewPage(rows, None)


def next_review(
    db: Database, tenant_id: str, where: QueueFilter, order: QueueOrder, *, after: str
) -> str | None:
    """The run whose review comes first in the queue as the reviewer sees it (``where``,
    ``order``), other than ``after`` (the one just decided); None when the queue is empty."""
    page = queue_page(db, tenant_id, where, order, limit=2)
    return next((r.run_id for r in page.reviews if r.run_id != after), None)


def _filters(tenant_id: str, where: QueueFilter) -> dict[str, str | None]:
    return {
        "tenant_id": tenant_id,
        "pipeline": where.pipeline,
        "step": where.step,
        "reason": where.reason,
        "batch_id": uuid_or_none(where.batch_id, "batch_id"),
    }
