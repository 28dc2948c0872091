"""What the review queue's routes accept and answer (docpipe.state.reviews)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from docpipe.pipelines.model import NAME_PATTERN
from docpipe.statuses import DecisionAction, ReviewReason

__all__ = [
    "DecisionIn",
    "DecisionOut",
    "DocumentTextOut",
    "EditIn",
    "ReviewDetailOut",
    "ReviewItemOut",
    "ReviewPageOut",
    "ReviewReasonOut",
    "ReviewStateOut",
]

_ANSWER = ConfigDict(from_attributes=True)
MAX_EDITS = 1000


class ReviewReasonOut(BaseModel):
    kind: str = Field(
        description="the rule or failure: always, above, below, missing, "
        "longer_than, shorter_than, sample, unsupported_evidence, "
        "invalid_output, attempts_exhausted, definition_changed"
    )
    field: str | None = Field(default=None, description="the output field the rule looked at")
    message: str


class ReviewStateOut(BaseModel):
    """Why a run waits for a person, while it does."""

    step: str = Field(description="the step a person is asked about")
    reason: ReviewReason
    reasons: list[ReviewReasonOut]
    revision: int = Field(
        description="raised by every change of the review; a decision "
        "names the revision it was made on"
    )
    waiting_since: datetime


class DecisionOut(BaseModel):
    """One decision of the audit trail."""

    model_config = _ANSWER

    id: int
    step: str
    revision: int = Field(description="the revision the decision was made on")
    action: DecisionAction
    reviewer_key_id: str | None = Field(
        description="the API key that decided (null without API keys)"
    )
    reviewer_name: str = Field(description="the key's name, else its id")
    reason: str | None
    output_before: dict[str, Any] | None = None
    output_after: dict[str, Any] | None = None
    edits: list[dict[str, Any]]
    diff: list[dict[str, Any]] = Field(description="per field: {path, change, before, after}")
    retry_from: str | None
    retry_model: str | None
    decided_at: datetime


class ReviewItemOut(BaseModel):
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
    reviews: list[ReviewItemOut] = Field(description="oldest first")
    next_cursor: str | None = Field(
        description="pass as cursor for the next page; null: this was the last"
    )


class ReviewDetailOut(BaseModel):
    """Everything a reviewer needs to decide."""

    review: ReviewItemOut
    document_format: str
    document_text: str = Field(description="the text the offsets of the evidence refer to")
    page_starts: list[int] = Field(description="offset in document_text where each page starts")
    input: dict[str, Any] = Field(
        description="the outputs of the steps before, as the step read them"
    )
    output: dict[str, Any] | None = Field(
        description="the step's output (null when it gave none that could be kept)"
    )
    errors: list[str]
    evidence: list[dict[str, Any]]
    output_schema: dict[str, Any] = Field(description="what an approved output must satisfy")
    history: list[DecisionOut]
    models: list[str] = Field(description="models a retry may ask")


class EditIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="a JSON Pointer into the output, e.g. /fields/total/amount",
        max_length=1000,
        pattern="^/",
    )
    action: Literal["confirm", "correct", "clear"]
    value: Any = Field(default=None, description="correct: the new value")


class QuoteIn(BaseModel):
    """A passage of the document a reviewer chose as a value's support."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="the value's JSON Pointer, as its evidence record's path names it",
        max_length=1000,
        pattern="^/",
    )
    start: int = Field(ge=0, le=2**31 - 1, description="offset in the document's text")
    end: int = Field(ge=1, le=2**31 - 1, description="offset after the passage's last character")


class DecisionIn(BaseModel):
    """A reviewer's decision on the revision it was made on."""

    model_config = ConfigDict(extra="forbid")

    revision: int = Field(ge=0, description="the review's revision the decision was made on")
    action: DecisionAction
    output: dict[str, Any] | None = Field(
        default=None, description="approve: the whole output as the reviewer wants it"
    )
    edits: list[EditIn] = Field(
        default_factory=list,
        max_length=MAX_EDITS,
        description="approve: field by field, after output",
    )
    from_step: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="retry: this step or an earlier one (default: the step in review)",
    )
    model: str | None = Field(
        default=None,
        max_length=200,
        description="retry: a model the deployment knows, asked instead of from_step's own",
    )
    reason: str | None = Field(
        default=None, max_length=2000, description="reject: why (required); otherwise a note"
    )
    quotes: list[QuoteIn] = Field(
        default_factory=list,
        max_length=MAX_EDITS,
        description="approve: passages of the document that support values instead of the "
        "model's quotes (each judged as a quote is: supported when the value can be read in "
        "it), recorded with the reviewer's name (quoted_by)",
    )


class DocumentTextOut(BaseModel):
    document_id: str
    format: str
    pages: int
    page_starts: list[int]
    page: int | None = Field(description="the page asked for (1-based), or null: the whole text")
    start: int = Field(description="offset of text in the whole document's text")
    text: str
