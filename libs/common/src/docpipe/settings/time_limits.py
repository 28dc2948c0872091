"""The time-limit rule: every limit fires before the one around it.

A provider call times out (and is recorded) before Celery interrupts the step; the soft limit
hands the step back before the hard limit kills the process, leaving the calls already on
the wire time to be answered and recorded; the hard limit ends a task before Redis hands its
message to a second worker. The concerns whose own timeouts must fit inside a step
(database, broker, limiter, documents, webhooks) build on :class:`TimeLimitSettings` and
check them beside their fields (docs: reference/settings, "The time-limit rule").
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Annotated, Self

from pydantic import BaseModel, Field, model_validator

__all__ = ["Seconds", "TimeLimitSettings"]

Seconds = Annotated[float, Field(gt=0)]


class TimeLimitSettings(BaseModel):
    """Time limits: a provider call, a step, the broker's redelivery"""

    llm_timeout_s: Seconds = Field(default=20.0, description="one provider call")
    task_soft_time_limit_s: Seconds = Field(
        default=60.0,
        description="a step is interrupted and handed back (its finished calls stay memoised)",
    )
    task_time_limit_s: Seconds = Field(default=90.0, description="the worker child is killed")
    broker_visibility_timeout_s: Seconds = Field(
        default=3600.0, description="Redis re-delivers unacked messages after this"
    )

    @model_validator(mode="after")
    def _time_limits_nest(self) -> Self:
        chain = [
            ("DOCPIPE_LLM_TIMEOUT_S", self.llm_timeout_s),
            ("DOCPIPE_TASK_SOFT_TIME_LIMIT_S", self.task_soft_time_limit_s),
            ("DOCPIPE_TASK_TIME_LIMIT_S", self.task_time_limit_s),
            ("DOCPIPE_BROKER_VISIBILITY_TIMEOUT_S", self.broker_visibility_timeout_s),
        ]
        for (inner, inner_s), (outer, outer_s) in itertools.pairwise(chain):
            if not inner_s < outer_s:
                raise ValueError(
                    f"incoherent time limits: {inner}={inner_s:g} must be below "
                    f"{outer}={outer_s:g} (rule: llm timeout < task soft limit < task hard "
                    f"limit < broker visibility timeout)"
                )
        if not self.task_soft_time_limit_s + self.llm_timeout_s < self.task_time_limit_s:
            raise ValueError(
                f"DOCPIPE_TASK_TIME_LIMIT_S={self.task_time_limit_s:g} must exceed "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S + DOCPIPE_LLM_TIMEOUT_S="
                f"{self.task_soft_time_limit_s + self.llm_timeout_s:g}: calls in flight at the "
                f"soft limit are answered and recorded before the hard limit kills the process"
            )
        return self

    def check_below_soft_limit(self, timeouts: Mapping[str, float], why: str) -> None:
        """ValueError naming the first of ``timeouts`` (variable: seconds) that is not below
        the soft time limit, and ``why`` it must be."""
        for name, value in timeouts.items():
            if not value < self.task_soft_time_limit_s:
                raise ValueError(
                    f"{name}={value:g} must be below DOCPIPE_TASK_SOFT_TIME_LIMIT_S="
                    f"{self.task_soft_time_limit_s:g}: {why}"
                )
