"""What the evaluation routes accept and answer (docpipe.state.evaluation_sets,
docpipe.state.evaluations)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from docpipe.pipelines.model import NAME_PATTERN
from docpipe_api.schemas import UUID_PATTERN, BatchStatusOut, Usd

__all__ = [
    "CompareOut",
    "EvaluationDocumentOut",
    "EvaluationDocumentsOut",
    "EvaluationIn",
    "EvaluationOut",
    "EvaluationSetIn",
    "EvaluationSetOut",
    "EvaluationSetsOut",
    "EvaluationsOut",
    "PromoteIn",
    "SetItemOut",
    "SetItemsOut",
]

_ANSWER = ConfigDict(from_attributes=True)
# A set's id (a UUID) matches it too, so one pattern checks a reference by name or by id.
SET_NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
MAX_MODELS = 50


class EvaluationSetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=SET_NAME_PATTERN, description="unique within the tenant")
    pipeline: str = Field(pattern=NAME_PATTERN, description="a pipeline's name (any version)")
    step: str = Field(pattern=NAME_PATTERN, description="the step whose output is expected")


class EvaluationSetOut(BaseModel):
    model_config = _ANSWER

    id: str
    name: str
    pipeline: str
    step: str
    version: int = Field(description="raised by every change of its items")
    items: int = Field(description="items in the current version")
    created_at: datetime
    updated_at: datetime


class EvaluationSetsOut(BaseModel):
    sets: list[EvaluationSetOut]


class SetItemOut(BaseModel):
    model_config = _ANSWER

    document_id: str
    expected: dict[str, Any]
    source: Literal["review", "upload", "samples"]
    decided_by: str | None = Field(description="the reviewer, for a promoted review")
    review_decision_id: int | None
    run_id: str | None = Field(description="the run a promoted review was made on")
    added_in: int = Field(description="the set version that added it")
    created_at: datetime


class SetItemsOut(BaseModel):
    set: str
    version: int
    items: list[SetItemOut]
    next_after: str | None = Field(description="pass as after= for the next page")


_RUN_OR_BATCH = {"type": "string", "pattern": f"^{UUID_PATTERN}$"}


class PromoteIn(BaseModel):
    """One run's reviewed output, or those of every reviewed run of a batch: exactly one."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"minProperties": 1, "maxProperties": 1}
    )

    run_id: Annotated[str | None, WithJsonSchema(_RUN_OR_BATCH)] = Field(
        default=None, pattern=f"^{UUID_PATTERN}$"
    )
    batch_id: Annotated[str | None, WithJsonSchema(_RUN_OR_BATCH)] = Field(
        default=None, pattern=f"^{UUID_PATTERN}$", description="every reviewed run of a batch"
    )

    @model_validator(mode="before")
    @classmethod
    def _exactly_one(cls, data: Any) -> Any:
        if isinstance(data, dict) and (len(data) != 1 or None in data.values()):
            raise ValueError("name one run (run_id) or one batch (batch_id)")
        return data


class EvaluationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    set: str = Field(pattern=SET_NAME_PATTERN, description="the set's name or id")
    pipeline: str = Field(min_length=1, max_length=200, description="a pipeline key, name:vN")
    models: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_MODELS,
        description='a model for every step that asks one ("*") or per step, among the '
        "models the deployment knows",
    )
    budget_usd: Usd | None = Field(default=None, description="the evaluation batch's budget")


class EvaluationOut(BaseModel):
    """An evaluation's progress (its batch) and, once the batch ended, its report."""

    id: str
    set: str
    set_version: int
    pipeline: str
    step: str
    models: dict[str, str]
    status: Literal["running", "reported"]
    batch: BatchStatusOut | None = Field(description="its batch, while it runs")
    report: dict[str, Any] | None = Field(
        description="scores per field and overall, cost, tokens, latency, the review rules "
        "measured, each document's accuracy (docs: guides/measuring-quality.md)"
    )
    created_at: datetime


class EvaluationsOut(BaseModel):
    evaluations: list[EvaluationOut]


class EvaluationDocumentOut(BaseModel):
    model_config = _ANSWER

    document_id: str
    run_id: str | None
    status: str
    accuracy: float
    wrong: list[dict[str, Any]] = Field(
        description="each value not correct: path, pointer, outcome, expected, got, the "
        "evidence of what was got"
    )
    paused_by: list[str] = Field(description="the review rules that held on the run")


class EvaluationDocumentsOut(BaseModel):
    documents: list[EvaluationDocumentOut]
    next_after: str | None


class CompareOut(BaseModel):
    baseline: str
    candidate: str
    documents: int
    accuracy: dict[str, Any] = Field(
        description="both accuracies and the difference with its paired 95 % interval"
    )
    fields: list[dict[str, Any]]
    flipped_to_wrong: list[dict[str, Any]]
    flipped_to_right: list[dict[str, Any]]
    cost_usd: dict[str, Any]
    gate: dict[str, Any] | None = Field(
        default=None, description="with max_drop: whether the candidate is worse beyond noise"
    )
