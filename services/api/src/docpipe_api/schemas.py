"""What the API accepts and answers, as pydantic models (the OpenAPI document is built from
these). Request models forbid unknown fields and are strict: a misspelt option is an error,
not a default, and a value of another type (``"deadline_s": "60"``, ``"start_at": 0``) is an
error, not a guess; JSON numbers and decimal strings both give a Decimal."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    HttpUrl,
    WithJsonSchema,
    model_validator,
)

from docpipe import __version__
from docpipe.state.documents import DOCUMENT_ID
from docpipe.statuses import DeliveryStatus, Lane, Priority
from docpipe_api.review_schemas import Decision, ReviewState

__all__ = [
    "DEFAULT_PIPELINE",
    "DOCUMENT_ID_ECMA",
    "MAX_DEADLINE_S",
    "NO_NUL",
    "UUID_PATTERN",
    "BatchAccepted",
    "BatchDocumentIn",
    "BatchRequest",
    "BatchRun",
    "BatchRunsPage",
    "BatchStatus",
    "DocumentOut",
    "DocumentText",
    "ErrorBody",
    "EvidencedValue",
    "ExtractAccepted",
    "ExtractRequest",
    "Health",
    "ModelChoice",
    "PipelineDetail",
    "PipelineList",
    "PipelineSummary",
    "Readiness",
    "ResultLine",
    "RunStatus",
    "RunStatusList",
    "StepDetail",
    "StepStatus",
    "WebhookSecret",
    "WebhookSecretCreated",
    "WebhookSecrets",
    "WebhookStatus",
    "request_body_schema",
]

DEFAULT_PIPELINE = "document_extract:v1"
REQUEST_MODEL = ConfigDict(extra="forbid", strict=True)
# Answers are built from docpipe.state's rows (dataclasses) by attribute name.
ANSWER_MODEL = ConfigDict(from_attributes=True)
UUID_PATTERN = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# PostgreSQL text cannot hold NUL characters, so documents must not contain them.
NO_NUL = "^[^\\u0000]*$"
# The most DOCPIPE_MAX_DEADLINE_S may allow; the setting (7 days by default) is what applies.
MAX_DEADLINE_S = 30 * 24 * 3600.0
# Document ids as OpenAPI (ECMA-262) writes the pattern, where $ is \Z.
DOCUMENT_ID_ECMA = DOCUMENT_ID.pattern.replace("\\Z", "$")

# Amounts of US dollars as PostgreSQL keeps them (numeric(14,6)): from one micro-dollar to
# just under 10^8. A JSON number in that range is rounded to micro-dollars; a string must
# be a plain decimal of at most 6 places, no sign, no exponent, no leading zeros. The
# OpenAPI document says exactly this, so every value it allows is accepted.
USD_MIN = Decimal("0.000001")
USD_MAX = Decimal("99999999.999999")
# Below one dollar: "0." and a fraction that is not all zeros.
USD_CENTS_STRING = (
    r"0\.(?:[1-9][0-9]{0,5}|0[1-9][0-9]{0,4}|00[1-9][0-9]{0,3}|000[1-9][0-9]{0,2}"
    r"|0000[1-9][0-9]?|00000[1-9])"
)
USD_STRING = re.compile(rf"^(?:[1-9][0-9]{{0,7}}(?:\.[0-9]{{1,6}})?|{USD_CENTS_STRING})$")


def _usd(value: Any) -> Any:
    if isinstance(value, str):
        if not USD_STRING.fullmatch(value):
            raise ValueError(
                "a decimal string of dollars such as '0.25': digits with at most 6 places, no "
                "sign, exponent or leading zeros, at least 0.000001"
            )
        return Decimal(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        amount = Decimal(repr(value))  # the JSON number as written, not its binary float
        if not amount.is_finite() or not USD_MIN <= amount <= USD_MAX:
            raise ValueError(f"must be from {USD_MIN} to {USD_MAX} dollars")
        return amount.quantize(USD_MIN, rounding=ROUND_HALF_EVEN)
    raise ValueError("a number of dollars, or a decimal string")


Usd = Annotated[
    Decimal,
    BeforeValidator(_usd),
    WithJsonSchema({
        "anyOf": [
            {"type": "number", "minimum": float(USD_MIN), "maximum": float(USD_MAX),
             "description": "rounded to micro-dollars (6 places)"},
            {"type": "string", "pattern": USD_STRING.pattern},
        ]
    }),
]  # fmt: skip


def request_body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema for a hand-written OpenAPI ``requestBody``, its ``$defs``
    inlined: the OpenAPI document would resolve ``#/$defs/...`` against its own root."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/"):
            rest = {key: inline(value) for key, value in node.items() if key != "$ref"}
            return {**inline(definitions[ref.removeprefix("#/$defs/")]), **rest}
        return {key: inline(value) for key, value in node.items()}

    return dict(inline(schema))


class ErrorBody(BaseModel):
    """Every error answer: one human-readable sentence saying what was wrong."""

    detail: str


class DocumentText(BaseModel):
    """The JSON form of a document upload (the other form is the text as text/plain)."""

    model_config = REQUEST_MODEL

    text: str = Field(json_schema_extra={"pattern": NO_NUL})


class DocumentOut(BaseModel):
    model_config = ANSWER_MODEL

    id: str
    sha256: str = Field(description="SHA-256 of the uploaded bytes (a text's UTF-8), hex")
    size_bytes: int
    created_at: datetime
    format: Literal["text", "pdf", "docx"] = Field(description="as its bytes showed")
    extracted: bool = Field(description="its text is known (a PDF's or DOCX's once a run's "
                            "extract_text step read it; a text's always)")  # fmt: skip
    pages: int | None = Field(description="pages of its text; null until extracted")
    ocr_pages: int | None = Field(description="pages read by OCR (no text layer); null until "
                                  "extracted")  # fmt: skip
    ocr: bool | None = Field(description="whether any page needed OCR; null until extracted")
    warnings: list[str] | None = Field(
        description="what extraction noticed (low OCR confidence, pages without text); null "
        "until extracted"
    )


class ExtractRequest(BaseModel):
    """Options of an extraction run; every field may be left out."""

    # start_at is for the interactive lane (batch runs start when admission lets them).
    model_config = REQUEST_MODEL | ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["lane", "start_at"],
                "properties": {"lane": {"const": "batch"}, "start_at": {"type": "string"}},
            }
        }
    )

    pipeline: str = Field(default=DEFAULT_PIPELINE, min_length=1, max_length=200)
    lane: Lane = Lane.INTERACTIVE
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEADLINE_S,
        allow_inf_nan=False,
        description="the run must finish within this many seconds of the request (of start_at, "
        "when that is later); at most DOCPIPE_MAX_DEADLINE_S (default 604800, 7 days; more: "
        "422)",
    )
    budget_usd: Usd | None = Field(
        default=None,
        description="the run stops as budget_exceeded once its provider calls cost more; "
        "at most DOCPIPE_MAX_RUN_BUDGET_USD (default 100; more: 422); left out: "
        "DOCPIPE_DEFAULT_RUN_BUDGET_USD (default 1.00)",
    )
    callback_url: HttpUrl | None = Field(
        default=None, description="called once the run has ended (http or https)"
    )
    start_at: AwareDatetime | None = Field(
        default=None,
        description="start no earlier than this (ISO 8601 with a time zone); interactive "
        "lane; at most DOCPIPE_MAX_START_DELAY_S (default 604800, 7 days) ahead (more: 422)",
    )
    priority: Priority | None = Field(
        default=None,
        description="how each call picks among a step's candidate models: urgent (the "
        "fastest the budget left can pay for), normal (the step's own order), low (the "
        "cheapest); default: normal in the interactive lane, low in the batch lane",
    )

    def fingerprint(self) -> dict[str, Any]:
        """The options in one canonical form, so equal requests compare equal."""
        return ({"priority": self.priority} if self.priority else {}) | {
            "pipeline": self.pipeline,
            "lane": self.lane,
            "deadline_s": self.deadline_s,
            "budget_usd": format(self.budget_usd.normalize(), "f") if self.budget_usd else None,
            "callback_url": str(self.callback_url) if self.callback_url else None,
            "start_at": self.start_at.isoformat() if self.start_at else None,
        }


class ExtractAccepted(BaseModel):
    run_id: str
    status: str
    created: bool = Field(description="false: the Idempotency-Key named an existing run")


class ModelChoice(BaseModel):
    """Calls of a step that went to one model for one reason (routing, or fallback)."""

    model_config = ANSWER_MODEL

    model: str
    reason: str = Field(description="only_candidate, preferred, fastest, cheapest, "
                        "within_budget or fallback")  # fmt: skip
    calls: int


class StepStatus(BaseModel):
    model_config = ANSWER_MODEL

    step: str
    status: str
    attempt: int
    model: str | None
    model_choices: list[ModelChoice] = Field(
        default_factory=list, description="where the step's calls went, and why"
    )
    prompt_version: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None
    reviewed: Literal["approved", "reused"] | None = Field(
        default=None,
        description="approved: the output is a person's decision; reused: an "
        "earlier run's approval of the same input, so no one was asked again",
    )


class EvidencedValue(BaseModel):
    """An extracted value with the evidence of the quote it was read from."""

    model_config = ANSWER_MODEL

    field: str = Field(description="the field the value is for, e.g. liability_cap")
    path: str | None = Field(default=None, description="JSON Pointer of the value in its "
                             "step's output, where known")  # fmt: skip
    value: Any = Field(description="the value as read (for a list such as parties: the items "
                       "this quote supports)")  # fmt: skip
    quote: str = Field(description="the passage the model says it read the value from")
    start: int | None = Field(description="where the quote starts in the document's text "
                              "(offset in characters); null when it is not there")  # fmt: skip
    end: int | None = Field(description="where it ends (exclusive): text[start:end] is the "
                            "passage as the document has it")  # fmt: skip
    page: int | None = Field(description="1-based page of start (1 for plain text)")
    section: str | None = Field(description="number of the section holding start")
    section_title: str | None = None
    supported: bool = Field(description="false: the quote was not found in the document "
                            "(whitespace, hyphenation and quotation marks aside); the value "
                            "is kept, flagged, and a pipeline with review_if: "
                            "[unsupported_evidence] pauses for review")  # fmt: skip
    corrected: bool = Field(default=False, description="a reviewer corrected the value")


class TypedResult(BaseModel):
    """What a run gave, typed as provider batch APIs type a request's result."""

    type: Literal["succeeded", "failed", "needs_review", "cancelled", "pending"] = Field(
        description="succeeded: done; failed: failed, budget_exceeded or expired (error says "
        "why); needs_review: waits for a person; cancelled: the run or its batch was "
        "cancelled; pending: queued or running still"
    )
    outputs: dict[str, dict[str, Any] | None] = Field(
        description="every step's output in pipeline order; null for a step not done"
    )
    values: list[EvidencedValue] = Field(description="each extracted value with its evidence")


class ResultLine(BaseModel):
    """One line of a batch's results export: one run."""

    custom_id: str = Field(description="the document id the batch request named (or docpipe "
                           "generated, for a document sent without one)")  # fmt: skip
    run_id: str = Field(description="the run; pass the last one you got as ?after= to resume")
    document_id: str
    position: int | None = Field(description="the document's place in the batch request, "
                                 "0-based")  # fmt: skip
    status: str = Field(description="the run's status")
    result: TypedResult
    review: ReviewState | None = Field(
        description="while the run awaits a person: the step, why, and the revision"
    )
    decisions: list[Decision] = Field(description="the audit trail of its reviews, oldest first")
    cost_usd: float
    error: str | None
    created_at: datetime
    finished_at: datetime | None


class RunStatus(BaseModel):
    model_config = ANSWER_MODEL

    run_id: str
    pipeline: str
    document_id: str
    lane: str
    priority: str
    batch_id: str | None
    status: str
    current_step: str | None
    steps_done: int
    steps_total: int
    cost_so_far_usd: float
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    steps: list[StepStatus]
    review: ReviewState | None = Field(
        default=None,
        description="while the run awaits a person (status needs_review): the "
        "step, why, and the revision a decision names (POST /runs/{run_id}/review)",
    )
    decisions: list[Decision] = Field(
        default_factory=list, description="the audit trail of its reviews, oldest first"
    )
    webhook: WebhookStatus | None = None
    result: dict[str, Any] | None = Field(
        default=None, description="each step's output by step name, once the run is done"
    )
    values: list[EvidencedValue] | None = Field(
        default=None,
        description="once the run is done or needs_review: each extracted value with its "
        "evidence, for pipelines whose steps record it (document_extract does)",
    )


class RunStatusList(BaseModel):
    runs: list[RunStatus] = Field(description="in the order asked; unknown ids left out")


class WebhookStatus(BaseModel):
    """The latest completion-webhook delivery of a run or batch."""

    model_config = ANSWER_MODEL

    status: DeliveryStatus
    attempts: int
    last_status: int | None = Field(description="the receiver's last HTTP status")
    last_error: str | None = Field(
        description="what went wrong, in general terms only: 'refused: destination not "
        "allowed', 'timeout', 'connection failed', 'HTTP <status>', 'interrupted', "
        "'no signing secret'"
    )
    delivered_at: datetime | None
    next_attempt_at: datetime | None = Field(
        default=None, description="while pending: when the next attempt is due"
    )


class WebhookSecret(BaseModel):
    """A webhook signing secret as it may be shown: never the secret itself."""

    model_config = ANSWER_MODEL

    id: str
    created_at: datetime
    expires_at: datetime | None = Field(
        description="null for the current secret; a rotated-out one signs until then"
    )


class WebhookSecrets(BaseModel):
    """The tenant's signing secrets: every webhook is signed with each of them."""

    current: WebhookSecret
    previous: WebhookSecret | None = Field(
        description="the secret a rotation replaced, still signing beside the current one "
        "until its expires_at, so receivers can switch over"
    )


class WebhookSecretCreated(WebhookSecrets):
    secret: str = Field(
        description="whsec_...: shown only in this answer; receivers verify webhooks with it "
        "(Standard Webhooks, e.g. standardwebhooks.Webhook(secret).verify(body, headers))"
    )


class BatchDocumentIn(BaseModel):
    """A new document (``text``, with an optional ``id``) or one stored earlier (``id``)."""

    model_config = REQUEST_MODEL | ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"type": "string"}}}
                for name in ("id", "text")
            ]
        }
    )

    id: str | None = Field(
        default=None, min_length=1, max_length=128, json_schema_extra={"pattern": DOCUMENT_ID_ECMA}
    )
    text: str | None = Field(default=None, json_schema_extra={"pattern": NO_NUL})

    @model_validator(mode="after")
    def _id_or_text(self) -> BatchDocumentIn:
        if self.id is None and self.text is None:
            raise ValueError("give the document's text, its stored id, or both")
        return self


class BatchRequest(BaseModel):
    """Many documents processed in the batch lane, with shared options."""

    model_config = REQUEST_MODEL

    documents: list[BatchDocumentIn] = Field(
        min_length=1,
        description="at most DOCPIPE_MAX_BATCH_DOCUMENTS documents (default 10000; more: "
        "422), each text at most DOCPIPE_MAX_DOCUMENT_BYTES of UTF-8 (default 1000000; more: "
        "413), the whole body at most DOCPIPE_MAX_BATCH_BYTES (default 32000000; more: 413)",
    )
    pipeline: str = Field(default=DEFAULT_PIPELINE, min_length=1, max_length=200)
    budget_usd: Usd | None = Field(
        default=None,
        description="the whole batch stops as budget_exceeded once its calls cost more",
    )
    run_budget_usd: Usd | None = Field(
        default=None,
        description="each run stops as budget_exceeded once its calls cost more; at most "
        "DOCPIPE_MAX_RUN_BUDGET_USD (default 100; more: 422); left out: "
        "DOCPIPE_DEFAULT_RUN_BUDGET_USD (default 1.00)",
    )
    callback_url: HttpUrl | None = Field(
        default=None, description="called once the batch has ended (http or https)"
    )
    deadline_s: float | None = Field(
        default=None, gt=0, le=MAX_DEADLINE_S, allow_inf_nan=False,
        description="every run must finish within this many seconds of the request; at "
        "most DOCPIPE_MAX_DEADLINE_S (default 604800, 7 days; more: 422)",
    )  # fmt: skip
    priority: Priority | None = Field(
        default=None, description="the runs' priority (see ExtractRequest); default: low"
    )


class BatchAccepted(BaseModel):
    batch_id: str
    status: str
    runs_total: int
    created: bool = Field(description="false: the Idempotency-Key named an existing batch")


class BatchStatus(BaseModel):
    model_config = ANSWER_MODEL

    batch_id: str
    pipeline: str
    status: str
    runs_total: int
    runs_by_status: dict[str, int]
    waiting_admission: int = Field(description="runs still waiting in PostgreSQL")
    steps_done: int
    steps_total: int
    cost_so_far_usd: float
    budget_usd: float | None
    eta_s: float | None = Field(description="seconds to go at the pace so far (null: unknown)")
    created_at: datetime
    finished_at: datetime | None
    webhook: WebhookStatus | None


class BatchRun(BaseModel):
    model_config = ANSWER_MODEL

    run_id: str
    document_id: str
    status: str
    current_step: str | None
    steps_done: int
    steps_total: int
    cost_usd: float
    error: str | None


class BatchRunsPage(BaseModel):
    runs: list[BatchRun]
    next_after: str | None = Field(description="pass as ?after= for the next page")


class PipelineSummary(BaseModel):
    key: str = Field(description="name:vN, what runs name in their 'pipeline'")
    name: str
    version: int
    source: str = Field(description="where the definition was loaded from")
    definition_hash: str = Field(description="SHA-256 of the definition a new run starts with")
    steps: list[str]


class PipelineList(BaseModel):
    pipelines: list[PipelineSummary]


class StepDetail(BaseModel):
    name: str
    kind: str = Field(description="ask, map or reduce (pipeline files), or python")
    models: list[str] = Field(description="tried in this order; empty: the step asks no model")
    prompt_version: str
    max_attempts: int | None = Field(description="null: DOCPIPE_MAX_STEP_ATTEMPTS")
    budget_usd: Decimal | None
    output_schema: dict[str, Any]


class PipelineDetail(BaseModel):
    key: str
    name: str
    version: int
    source: str
    definition_hash: str
    steps: list[StepDetail]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str = Field(default=__version__, description="docpipe's version (docpipe --version)")


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    checks: dict[str, Literal["ok", "unavailable"]] = Field(
        description="per dependency: 'ok' or 'unavailable' (the reason goes to the API's log)"
    )
