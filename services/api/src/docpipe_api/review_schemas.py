"""What the review queue's routes accept and answer (docpipe.state.reviews)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from docpipe.pipelines.model import NAME_PATTERN
from docpipe.statuses import DecisionAction, ReviewReason

__all__ = [
    "Decision",
    "DecisionIn",
    "DocumentTextOut",
    "EditIn",
    "ReviewDetailOut",
    "ReviewItem",
    "ReviewPageOut",
    "ReviewReasonOut",
    "ReviewState",
]

_ANSWER = ConfigDict(from_attributes=True)
MAX_EDITS = 1000


class ReviewReasonOut(BaseModel):
    kind: str = Field(description="the rule or failure: always, above, below, missing, "
                      "longer_than, shorter_than, sample, unsupported_evidence, "
                      "invalid_output, attempts_exhausted, definition_changed")  # fmt: skip
    field: str | None = Field(default=None, description="the output field the rule looked at")
    message: str


class ReviewState(BaseModel):
    """Why a run waits for a person, while it does."""

    step: str = Field(description="the step a person is asked about")
    reason: ReviewReason
    reasons: list[ReviewReasonOut]
    revision: int = Field(description="raised by every change of the review; a decision "
                          "names the revision it was made on")  # fmt: skip
    waiting_since: datetime


class Decision(BaseModel):
    """One decision of the audit trail."""

    model_config = _ANSWER

    id: int
    step: str
    revision: int = Field(description="the revision the decision was made on")
    action: DecisionAction
    reviewer_key_id: str | None = Field(description="the API key that decided (null "
                                        "without API keys)")  # fmt: skip
    reviewer_name: str = Field(description="the key's name, else its id")
    reason: str | None
    output_before: dict[str, Any] | None = None
    output_after: dict[str, Any] | None = None
    edits: list[dict[str, Any]]
    diff: list[dict[str, Any]] = Field(description="per field: {path, change, before, after}")
    retry_from: str | None
    retry_model: str | None
    decided_at: datetime


class ReviewItem(BaseModel):
    model_config = _ANSWER

    run_id: str
    pipeline: str
    document_id: str
    batch_id: str | None
    step: str
    reason: ReviewReason
    reasons: list[ReviewReasonOut]
    revision: int
    waiting_since: datetime
    age_s: float = Field(description="how long the run has waited, in seconds")


class ReviewPageOut(BaseModel):
    reviews: list[ReviewItem] = Field(description="oldest first")
    next_cursor: str | None = Field(description="pass as cursor for the next page; null: "
                                    "this was the last")  # fmt: skip


class ReviewDetailOut(BaseModel):
    """Everything a reviewer needs to decide."""

    review: ReviewItem
    document_format: str
    document_text: str = Field(description="the text the offsets of the evidence refer to")
    page_starts: list[int] = Field(description="offset in document_text where each page starts")
    input: dict[str, Any] = Field(description="the outputs of the steps before, as the step "
                                  "read them")  # fmt: skip
    output: dict[str, Any] | None = Field(description="the step's output (null when it gave "
                                          "none that could be kept)")  # fmt: skip
    errors: list[str]
    evidence: list[dict[str, Any]]
    output_schema: dict[str, Any] = Field(description="what an approved output must satisfy")
    history: list[Decision]
    models: list[str] = Field(description="models a retry may ask")


class EditIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="a JSON Pointer into the output, e.g. /fields/total/amount",
                      max_length=1000, pattern="^/")  # fmt: skip
    action: Literal["confirm", "correct", "clear"]
    value: Any = Field(default=None, description="correct: the new value")


class DecisionIn(BaseModel):
    """A reviewer's decision on the revision it was made on."""

    model_config = ConfigDict(extra="forbid")

    revision: int = Field(ge=0, description="the review's revision the decision was made on")
    action: DecisionAction
    output: dict[str, Any] | None = Field(
        default=None, description="approve: the whole output as the reviewer wants it"
    )
    edits: list[EditIn] = Field(default_factory=list, max_length=MAX_EDITS,
                                description="approve: field by field, after output")  # fmt: skip
    from_step: str | None = Field(default=None, pattern=NAME_PATTERN,
                                  description="retry: this step or an earlier one (default: "
                                  "the step in review)")  # fmt: skip
    model: str | None = Field(default=None, max_length=200,
                              description="retry: a model the deployment knows, asked "
                              "instead of from_step's own")  # fmt: skip
    reason: str | None = Field(default=None, max_length=2000,
                               description="reject: why (required); otherwise a note")  # fmt: skip


class DocumentTextOut(BaseModel):
    document_id: str
    format: str
    pages: int
    page_starts: list[int]
    page: int | None = Field(description="the page asked for (1-based), or null: the whole text")
    start: int = Field(description="offset of text in the whole document's text")
    text: str
