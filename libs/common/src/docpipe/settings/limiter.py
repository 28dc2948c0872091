"""The provider limiter shared by every worker, in Redis: priority, adaptation, breaker.
The limits it enforces (requests, tokens, calls in flight) are the providers' own
(:mod:`docpipe.settings.providers`)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from docpipe.settings.time_limits import Seconds, TimeLimitSettings

__all__ = ["LimiterSettings"]


class LimiterSettings(TimeLimitSettings):
    """The shared provider limiter"""

    limiter_interactive_reserve: float = Field(
        default=0.25,
        ge=0,
        lt=1,
        description="share of concurrency and bucket that batch calls leave to interactive ones",
    )
    limiter_decrease_factor: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="a 429 multiplies the allowed rate by this (at most once a second)",
    )
    limiter_recovery_per_s: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="while calls succeed, this share of the configured rate comes back per second",
    )
    limiter_max_wait_s: Seconds = Field(
        default=20.0,
        description=(
            "a call waiting longer for the limiter hands its step back without using up an attempt "
            "(must be below the soft limit)"
        ),
    )
    limiter_breaker_failures: int = Field(
        default=3,
        ge=1,
        description=(
            "after this many calls in a row found the provider down (connection errors, timeouts, "
            "5xx), everyone waits for one probe"
        ),
    )
    limiter_breaker_probe_s: Seconds = Field(
        default=2.0,
        description=(
            "while the provider is down, one probe call goes out this often; its failure does not "
            "count against its step"
        ),
    )

    @model_validator(mode="after")
    def _limiter_wait_fits_in_a_step(self) -> Self:
        if self.limiter_max_wait_s >= self.task_soft_time_limit_s:
            raise ValueError(
                f"DOCPIPE_LIMITER_MAX_WAIT_S={self.limiter_max_wait_s:g} must be below "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S={self.task_soft_time_limit_s:g}"
            )
        return self
