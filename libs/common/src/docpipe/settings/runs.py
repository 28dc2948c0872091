"""Runs: the pipelines they may follow, and what one run may cost, wait for and send."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

__all__ = ["RunSettings"]


class RunSettings(BaseModel):
    """Pipelines and runs"""

    # Pipelines besides the built-in ones (docs: guides/pipelines): a folder of
    # pipeline files, and Python modules, comma-separated ("pkg.flows" for its PIPELINES,
    # "pkg.flows:INVOICE"), besides installed packages' docpipe.pipelines entry points.
    pipelines_dir: Path | None = Field(
        default=None,
        description=(
            "a folder of pipeline files (`*.yaml`), loaded at start-up "
            "([Pipelines](../guides/pipelines.md))"
        ),
    )
    pipeline_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Python pipelines, comma-separated: `pkg.flows` (its `PIPELINES`) or "
            "`pkg.flows:INVOICE`; installed packages' `docpipe.pipelines` entry points are loaded "
            "too"
        ),
    )
    # What a run may cost: a request that names no budget gets the default (0: none), one
    # that names more than the maximum is refused (422). Each run stops as budget_exceeded
    # once its calls cost more.
    default_run_budget_usd: Decimal = Field(
        default=Decimal("1.00"),
        ge=0,
        decimal_places=6,
        description=(
            "the budget of a run whose request names none (`budget_usd`, a batch's "
            "`run_budget_usd`); 0: none"
        ),
    )
    max_run_budget_usd: Decimal = Field(
        default=Decimal("100"),
        ge=1,
        decimal_places=6,
        description="the most a request may give one run (more: 422); at least 1",
    )
    # How far ahead a request may place its run: deadline_s, and start_at (from now); more
    # is refused (422) instead of keeping rows and parked messages around for years.
    max_deadline_s: float = Field(
        default=7 * 86_400.0,
        gt=0,
        le=30 * 86_400.0,
        description="the longest `deadline_s` a request may ask (more: 422; at most 30 days)",
    )
    max_start_delay_s: float = Field(
        default=7 * 86_400.0,
        gt=0,
        le=365 * 86_400.0,
        description="how far ahead `start_at` may be (more: 422)",
    )
    step_call_concurrency: int = Field(
        default=4,
        ge=1,
        le=64,
        description="independent calls of one step (one per section) in flight at once",
    )
    # The most calls one fan-out (a step's ask_all over a list: sections, a map step's
    # items) may send; a longer list fails the step into review before any is sent. Every
    # pipeline's lists are bounded in their schemas too; this bounds Python pipelines' code.
    max_fanout_calls: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description=(
            "the most calls one fan-out (`ask_all` over a list: sections, a map step's items) may "
            "send; a longer list sends none and the run goes to `needs_review`"
        ),
    )

    @field_validator("pipeline_modules", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _default_budget_within_the_maximum(self) -> Self:
        if self.default_run_budget_usd > self.max_run_budget_usd:
            raise ValueError(
                f"DOCPIPE_DEFAULT_RUN_BUDGET_USD={self.default_run_budget_usd} must not exceed "
                f"DOCPIPE_MAX_RUN_BUDGET_USD={self.max_run_budget_usd}"
            )
        return self
