"""The provider-batch lane: how often waiting calls are packed into provider batches, and
what becomes of a call whose provider batch failed (docpipe.state.provider_batches)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from docpipe.settings.time_limits import Seconds

__all__ = ["ProviderBatchSettings"]


class ProviderBatchSettings(BaseModel):
    """Provider batches"""

    provider_batch_interval_s: Seconds = Field(
        default=10.0,
        description=(
            "beat packs waiting calls into provider batches and asks the provider about the "
            "open ones this often"
        ),
    )
    provider_batch_max_wait_s: Seconds = Field(
        default=300.0,
        description=(
            "a call waits at most this long to be packed: then its provider batch is created "
            "however few calls it holds (N seconds)"
        ),
    )
    provider_batch_min_calls: int = Field(
        default=500,
        ge=1,
        description=(
            "a provider batch is created as soon as this many calls for one model wait (M "
            "calls); each holds at most the provider's `batch.max_requests` and `max_bytes`"
        ),
    )
    provider_batch_recheck_s: Seconds = Field(
        default=3600.0,
        description=(
            "a step parked for its provider batch looks again after this long even if the "
            "poller never woke it (the poller wakes it once its calls are answered)"
        ),
    )
    provider_batch_fallback: Literal["next_batch", "realtime"] = Field(
        default="next_batch",
        description=(
            "a call whose provider batch expired or failed (or whose line errored "
            "transiently) goes to the next provider batch, or is sent in real time"
        ),
    )
    provider_batch_max_attempts: int = Field(
        default=2,
        ge=1,
        le=10,
        description=(
            "provider batches one call may go through; after that it is sent in real time"
        ),
    )
    provider_batch_deadline_margin_s: Seconds = Field(
        default=900.0,
        description=(
            "a call of a run whose deadline is nearer than this waits no longer for its "
            "provider batch (packed or not): it is sent in real time; an answer its provider "
            "batch brings later is recorded with its cost, never used"
        ),
    )
    provider_batch_wake_limit: int = Field(
        default=1000,
        ge=1,
        description=(
            "parked steps one pass wakes at most, oldest answers first: a huge provider batch "
            "that completes wakes its steps over several passes instead of flooding the queue"
        ),
    )
