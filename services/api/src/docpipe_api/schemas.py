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
from docpipe_api.review_schemas import DecisionOut, ReviewStateOut

__all__ = [
    "DEFAULT_PIPELINE",
    "DOCUMENT_ID_ECMA",
    "MAX_DEADLINE_S",
    "NO_NUL",
    "UUID_PATTERN",
    "BatchAcceptedOut",
    "BatchDocumentIn",
    "BatchIn",
    "BatchRunOut",
    "BatchRunsPageOut",
    "BatchStatusOut",
    "DocumentOut",
    "DocumentTextIn",
    "ErrorOut",
    "EvidencedValueOut",
    "ExtractAcceptedOut",
    "ExtractIn",
    "HealthOut",
    "ModelChoiceOut",
    "PageWarningOut",
    "PipelineDetailOut",
    "PipelineListOut",
    "PipelineSummaryOut",
    "QuoteBoxOut",
    "ReadinessOut",
    "ResultLineOut",
    "ReusedCallOut",
    "RotatedPageOut",
    "RunStatusListOut",
    "RunStatusOut",
    "StepDetailOut",
    "StepStatusOut",
    "WebhookSecretCreatedOut",
    "WebhookSecretOut",
    "WebhookSecretsOut",
    "WebhookStatusOut",
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
    WithJsonSchema(
        {
            "anyOf": [
                {
                    "type": "number",
                    "minimum": float(USD_MIN),
                    "maximum": float(USD_MAX),
                    "description": "rounded to micro-dollars (6 places)",
                },
                {"type": "string", "pattern": USD_STRING.pattern},
            ]
        }
    ),
]


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


class ErrorOut(BaseModel):
    """Every error answer: one human-readable sentence saying what was wrong."""

    detail: str


class DocumentTextIn(BaseModel):
    """The JSON form of a document upload (the other form is the text as text/plain)."""

    model_config = REQUEST_MODEL

    text: str = Field(json_schema_extra={"pattern": NO_NUL})


class PageWarningOut(BaseModel):
    """Something extraction noticed on a page."""

    kind: str = Field(
        description="low_ocr_confidence, no_text, ocr_timeout, reduced_resolution, "
        "orientation_undecided or garbage_text_layer"
    )
    page: int = Field(description="1-based page")
    value: float | None = Field(
        description="the measure that decided it: the OCR confidence "
        "(0-100), the seconds of the time limit, the dpi, the text "
        "layer's score (0-1); null when there is none"
    )
    message: str = Field(description="the same in a sentence")


class RotatedPageOut(BaseModel):
    page: int = Field(description="1-based page")
    degrees: Literal[90, 180, 270] = Field(
        description="clockwise, to read it upright from "
        "how the PDF shows it (its own /Rotate applied), "
        "as orientation detection found"
    )


class DocumentOut(BaseModel):
    model_config = ANSWER_MODEL

    id: str
    sha256: str = Field(description="SHA-256 of the uploaded bytes (a text's UTF-8), hex")
    size_bytes: int
    created_at: datetime
    format: Literal["text", "pdf", "docx", "png", "jpeg", "tiff"] = Field(
        description="as its bytes showed"
    )
    extracted: bool = Field(
        description="its text is known (a file's once a run's "
        "extract_text step read it; a text's always)"
    )
    pages: int | None = Field(description="pages of its text; null until extracted")
    ocr_pages: int | None = Field(
        description="pages read by OCR (no text layer); null until extracted"
    )
    ocr: bool | None = Field(description="whether any page needed OCR; null until extracted")
    warnings: list[PageWarningOut] | None = Field(
        description="what extraction noticed, page by page (low OCR confidence, pages without "
        "text, ...); null until extracted"
    )
    rotated_pages: list[RotatedPageOut] | None = Field(
        description="the pages found scanned sideways or upside down, turned to be read "
        "upright; null until extracted"
    )


class ExtractIn(BaseModel):
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
    reuse_answers: bool = Field(
        default=False,
        description="answer a call from the tenant's earlier answer to the very same request "
        "(model, parameters, messages, schema) when a run that reuses answers had it answered, "
        "instead of sending it: free, and recorded (reused_from); this run's own answers are "
        "kept for such runs. Evaluations always reuse",
    )

    def fingerprint(self) -> dict[str, Any]:
        """The options in one canonical form, so equal requests compare equal."""
        # Options added later count only when set: an earlier request's replay stays equal.
        return (
            ({"priority": self.priority} if self.priority else {})
            | ({"reuse_answers": True} if self.reuse_answers else {})
            | {
                "pipeline": self.pipeline,
                "lane": self.lane,
                "deadline_s": self.deadline_s,
                "budget_usd": format(self.budget_usd.normalize(), "f") if self.budget_usd else None,
                "callback_url": str(self.callback_url) if self.callback_url else None,
                "start_at": self.start_at.isoformat() if self.start_at else None,
            }
        )


class ExtractAcceptedOut(BaseModel):
    run_id: str
    status: str
    created: bool = Field(description="false: the Idempotency-Key named an existing run")


class ModelChoiceOut(BaseModel):
    """Calls of a step that went to one model for one reason (routing, or fallback)."""

    model_config = ANSWER_MODEL

    model: str
    reason: str = Field(
        description="only_candidate, preferred, fastest, cheapest, within_budget or fallback"
    )
    calls: int


class ReusedCallOut(BaseModel):
    """A call of a step answered from the tenant's reuse cache instead of sent."""

    model_config = ANSWER_MODEL

    call_id: int
    reused_from: int = Field(description="the earlier call whose answer it took")
    reused_from_run: str | None = Field(
        description="that call's run; null once its week of the call log is gone"
    )


class StepStatusOut(BaseModel):
    model_config = ANSWER_MODEL

    step: str
    status: str
    attempt: int
    model: str | None
    model_choices: list[ModelChoiceOut] = Field(
        default_factory=list, description="where the step's calls went, and why"
    )
    reused_calls: list[ReusedCallOut] = Field(
        default_factory=list,
        description="the calls of this step answered from an earlier identical request "
        "(reuse_answers, evaluations) for free, each with the call it reused (reused_from); "
        "the step's other calls were sent",
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


class QuoteBoxOut(BaseModel):
    """Where a quote stands on a page: one line of it."""

    model_config = ANSWER_MODEL

    page: int = Field(description="1-based page; its image: GET /documents/{id}/pages/{page}")
    left: float = Field(description="PDF points from the upright page's left edge")
    top: float = Field(description="points from its top edge (y grows downwards)")
    right: float
    bottom: float
    page_width: float = Field(
        description="the upright page's width in points: a box times "
        "image width / page_width stands on the image"
    )
    page_height: float


class EvidencedValueOut(BaseModel):
    """An extracted value with the evidence of the quote it was read from."""

    model_config = ANSWER_MODEL

    field: str = Field(description="the field the value is for, e.g. liability_cap")
    path: str | None = Field(
        default=None, description="JSON Pointer of the value in its step's output, where known"
    )
    value: Any = Field(
        description="the value as read (for a list such as parties: the items this quote supports)"
    )
    quote: str = Field(description="the passage the model says it read the value from")
    start: int | None = Field(
        description="where the quote starts in the document's text "
        "(offset in characters); null when it is not there"
    )
    end: int | None = Field(
        description="where it ends (exclusive): text[start:end] is the "
        "passage as the document has it"
    )
    page: int | None = Field(description="1-based page of start (1 for plain text)")
    section: str | None = Field(description="number of the section holding start")
    section_title: str | None = None
    supported: bool = Field(
        description="true: the quote is in the document (whitespace, hyphenation and "
        "quotation marks aside) and the value can be read in it (numbers, amounts, dates and "
        "names normalised; see the Evidence page); false otherwise (support says why): the "
        "value is kept, flagged, and a pipeline with review_if: [unsupported_evidence] "
        "pauses for review"
    )
    support: Literal["supported", "value_not_in_quote", "quote_not_found", "corrected"] | None = (
        Field(
            default=None,
            description="what the evidence says for the value: supported; value_not_in_quote "
            "(the quote is found, the value is not in it); quote_not_found; corrected (a "
            "reviewer changed the value: the model's quote, kept as model_quote, is not its "
            "support). Null in a record made before support was recorded, whose supported meant "
            "only that the quote was found",
        )
    )
    corrected: bool = Field(default=False, description="a reviewer corrected the value")
    corrected_by: str | None = Field(
        default=None, description="the name of the reviewer who corrected it"
    )
    model_quote: str | None = Field(
        default=None,
        description="a corrected value's quote as the model gave it (quote is then empty, "
        "unless a reviewer attached one)",
    )
    quoted_by: str | None = Field(
        default=None,
        description="the name of the reviewer who chose quote, a passage of the document, as "
        "the value's support (null: the model's quote)",
    )
    boxes: list[QuoteBoxOut] = Field(
        default_factory=list,
        description="the quote on its page(s), one box per line it covers; empty when it "
        "was not found, or in a text or DOCX document (no pages to draw on)",
    )


class TypedResultOut(BaseModel):
    """What a run gave, typed as provider batch APIs type a request's result."""

    type: Literal["succeeded", "failed", "needs_review", "cancelled", "pending"] = Field(
        description="succeeded: done; failed: failed, budget_exceeded or expired (error says "
        "why); needs_review: waits for a person; cancelled: the run or its batch was "
        "cancelled; pending: queued or running still"
    )
    outputs: dict[str, dict[str, Any] | None] = Field(
        description="every step's output in pipeline order; null for a step not done"
    )
    values: list[EvidencedValueOut] = Field(description="each extracted value with its evidence")


class ResultLineOut(BaseModel):
    """One line of a batch's results export: one run."""

    custom_id: str = Field(
        description="the document id the batch request named (or docpipe "
        "generated, for a document sent without one)"
    )
    run_id: str = Field(description="the run; pass the last one you got as ?after= to resume")
    document_id: str
    position: int | None = Field(description="the document's place in the batch request, 0-based")
    status: str = Field(description="the run's status")
    result: TypedResultOut
    review: ReviewStateOut | None = Field(
        description="while the run awaits a person: the step, why, and the revision"
    )
    decisions: list[DecisionOut] = Field(description="the audit trail of its reviews, oldest first")
    cost_usd: float
    error: str | None
    created_at: datetime
    finished_at: datetime | None


class RunStatusOut(BaseModel):
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
    steps: list[StepStatusOut]
    review: ReviewStateOut | None = Field(
        default=None,
        description="while the run awaits a person (status needs_review): the "
        "step, why, and the revision a decision names (POST /runs/{run_id}/review)",
    )
    decisions: list[DecisionOut] = Field(
        default_factory=list, description="the audit trail of its reviews, oldest first"
    )
    webhook: WebhookStatusOut | None = None
    result: dict[str, Any] | None = Field(
        default=None, description="each step's output by step name, once the run is done"
    )
    values: list[EvidencedValueOut] | None = Field(
        default=None,
        description="once the run is done or needs_review: each extracted value with its "
        "evidence, for pipelines whose steps record it (document_extract does)",
    )


class RunStatusListOut(BaseModel):
    runs: list[RunStatusOut] = Field(description="in the order asked; unknown ids left out")


class WebhookStatusOut(BaseModel):
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


class WebhookSecretOut(BaseModel):
    """A webhook signing secret as it may be shown: never the secret itself."""

    model_config = ANSWER_MODEL

    id: str
    created_at: datetime
    expires_at: datetime | None = Field(
        description="null for the current secret; a rotated-out one signs until then"
    )


class WebhookSecretsOut(BaseModel):
    """The tenant's signing secrets: every webhook is signed with each of them."""

    current: WebhookSecretOut
    previous: WebhookSecretOut | None = Field(
        description="the secret a rotation replaced, still signing beside the current one "
        "until its expires_at, so receivers can switch over"
    )


class WebhookSecretCreatedOut(WebhookSecretsOut):
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


class BatchIn(BaseModel):
    """Many documents processed in the batch lane, with shared options."""

    model_config = REQUEST_MODEL

    documents: list[BatchDocumentIn] = Field(
        min_length=1,
        # The most DOCPIPE_MAX_BATCH_DOCUMENTS may be; the served document states the
        # setting's own value (docpipe_api.openapi).
        max_length=100_000,
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
        default=None,
        gt=0,
        le=MAX_DEADLINE_S,
        allow_inf_nan=False,
        description="every run must finish within this many seconds of the request; at "
        "most DOCPIPE_MAX_DEADLINE_S (default 604800, 7 days; more: 422)",
    )
    priority: Priority | None = Field(
        default=None, description="the runs' priority (see ExtractIn); default: low"
    )
    reuse_answers: bool = Field(
        default=False, description="the runs reuse the tenant's answers (see ExtractIn)"
    )
    provider_batch: bool = Field(
        default=False,
        description="the provider-batch lane: the runs' calls go through their providers' "
        "batch interfaces at their discount (half price), answered within the provider's "
        "completion window (up to 24 hours); calls to a provider without a batch interface "
        "are sent at once",
    )


class BatchAcceptedOut(BaseModel):
    batch_id: str
    status: str
    runs_total: int
    created: bool = Field(description="false: the Idempotency-Key named an existing batch")


class BatchStatusOut(BaseModel):
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
    provider_batch: bool = Field(description="its calls go through provider batches")
    realtime_cost_usd: float = Field(
        description="what its calls so far would have cost in real time (cost_so_far_usd "
        "plus what provider batches' discount saved)"
    )
    reserved_usd: float = Field(
        description="what its calls waiting for provider batches are estimated to cost at "
        "the batch price, reserved of its budget until they are answered (not paid yet)"
    )
    eta_s: float | None = Field(description="seconds to go at the pace so far (null: unknown)")
    created_at: datetime
    finished_at: datetime | None
    webhook: WebhookStatusOut | None


class BatchRunOut(BaseModel):
    model_config = ANSWER_MODEL

    run_id: str
    document_id: str
    status: str
    current_step: str | None
    steps_done: int
    steps_total: int
    cost_usd: float
    error: str | None


class BatchRunsPageOut(BaseModel):
    runs: list[BatchRunOut]
    next_after: str | None = Field(description="pass as ?after= for the next page")


class PipelineSummaryOut(BaseModel):
    key: str = Field(description="name:vN, what runs name in their 'pipeline'")
    name: str
    version: int
    source: str = Field(description="where the definition was loaded from")
    definition_hash: str = Field(description="SHA-256 of the definition a new run starts with")
    steps: list[str]


class PipelineListOut(BaseModel):
    pipelines: list[PipelineSummaryOut]


class StepDetailOut(BaseModel):
    name: str
    kind: str = Field(description="ask, map or reduce (pipeline files), or python")
    models: list[str] = Field(description="tried in this order; empty: the step asks no model")
    prompt_version: str
    max_attempts: int | None = Field(description="null: DOCPIPE_MAX_STEP_ATTEMPTS")
    budget_usd: Decimal | None
    output_schema: dict[str, Any]


class PipelineDetailOut(BaseModel):
    key: str
    name: str
    version: int
    source: str
    definition_hash: str
    steps: list[StepDetailOut]


class HealthOut(BaseModel):
    status: Literal["ok"] = "ok"
    version: str = Field(default=__version__, description="docpipe's version (docpipe --version)")


class ReadinessOut(BaseModel):
    status: Literal["ready", "unavailable"]
    checks: dict[str, Literal["ok", "unavailable"]] = Field(
        description="per dependency: 'ok' or 'unavailable' (the reason goes to the API's log)"
    )
