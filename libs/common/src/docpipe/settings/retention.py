"""Retention: beat deletes what is old, in short transactions."""

from __future__ import annotations

from pydantic import BaseModel, Field

from docpipe.settings.time_limits import Seconds

__all__ = ["RetentionSettings"]


class RetentionSettings(BaseModel):
    """Retention"""

    # Retention: beat deletes what is older than this many days (0: keep forever), in
    # batches of retention_batch_size rows, each its own short transaction.
    retention_call_log_days: int = Field(
        default=30,
        ge=0,
        description=(
            "provider-call rows of ended runs older than this are deleted (0: kept forever)"
        ),
    )
    retention_outbox_days: int = Field(
        default=7,
        ge=0,
        description="outbox rows published longer ago are deleted (0: kept forever)",
    )
    retention_runs_days: int = Field(
        default=90,
        ge=0,
        description=(
            "runs that ended longer ago are deleted with their steps, calls, webhooks and ended "
            "batches (0: kept forever)"
        ),
    )
    retention_documents_days: int = Field(
        default=90,
        ge=0,
        description=(
            "documents stored longer ago that no run uses any more (their runs were pruned) are "
            "deleted (0: kept forever)"
        ),
    )
    retention_batch_size: int = Field(
        default=500, ge=1, le=10_000, description="rows deleted per transaction"
    )
    retention_interval_s: Seconds = Field(default=300.0, description="beat's retention pass")
    # The review backlog's own retention: off by default (a pause for a person lasts until a
    # person decides).
    review_expire_after_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "a run awaiting a person longer than this ends as `expired` at beat's next "
            "retention pass (its webhook says so; `docpipe_reviews_expired_total` counts it); "
            "0: reviews wait until someone decides"
        ),
    )
