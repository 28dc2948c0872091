"""docpipe's exceptions. Lower-level errors (httpx, JSON, schema) are mapped to these at the
boundary where they happen, so the executor decides on retries from the class alone::

    DocpipeError
    ├── LLMError                      a provider call or its output went wrong
    │   ├── TransientLLMError         retry later: timeout, connection, 429, 5xx
    │   └── PermanentLLMError         never retry: 4xx, empty input
    │       └── InvalidOutputError    output failed its schema after repairs and fallback
    │           └── TruncatedOutputError  output cut off at its max_tokens (finish_reason length)
    ├── UnreadableDocumentError       an uploaded file cannot give text (``kind`` says why)
    ├── RunStoppedError               the run ended (cancelled, expired) while a step ran
    ├── WaitingForProviderBatch       a call waits for a provider batch: the step parks
    ├── BudgetExceededError           the next call would spend past a run's or batch's budget
    ├── NotFoundError                 an id the caller named does not exist (for this tenant)
    ├── ConflictError                 the request contradicts stored state
    └── InvalidRequestError           the request itself is malformed
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BudgetExceededError",
    "ConflictError",
    "DocpipeError",
    "InvalidOutputError",
    "InvalidRequestError",
    "LLMError",
    "NotFoundError",
    "PermanentLLMError",
    "RunStoppedError",
    "TransientLLMError",
    "TruncatedOutputError",
    "UnreadableDocumentError",
    "WaitingForProviderBatch",
]


class DocpipeError(Exception):
    """Base of every error docpipe raises on purpose."""


class LLMError(DocpipeError):
    """A provider call failed; ``kind`` is a short, stable label for logs and metrics."""

    def __init__(self, message: str, *, kind: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.http_status = http_status
        # What the provider's rate-limit headers said with the failure, by field name.
        self.rate_limits: dict[str, float] = {}


class TransientLLMError(LLMError):
    """Worth retrying later; ``retry_after`` is the provider's own hint in seconds, if any."""

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, kind=kind, http_status=http_status)
        self.retry_after = retry_after
        # False when the failure says nothing about this step (the provider is down for
        # everyone): the step then waits without using up one of its attempts.
        self.counts_as_attempt = True


class PermanentLLMError(LLMError):
    """Retrying would pay again for the same failure."""


class InvalidOutputError(PermanentLLMError):
    """The model's answer stayed outside its schema; the run needs a human."""

    def __init__(self, message: str, *, kind: str = "invalid_output") -> None:
        super().__init__(message, kind=kind)


class TruncatedOutputError(InvalidOutputError):
    """The answer was cut off at the step's output budget (``finish_reason: length``).

    Permanent, not transient: the same request to the same model stops at the same token
    again, so retrying pays for the same cut. It is an invalid answer of *this* model: the
    fallback model (terser, or under a grammar that ends sooner) may still answer within
    the budget; when none does, the run needs a human, who may raise the step's max_tokens.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="truncated")


class UnreadableDocumentError(DocpipeError):
    """A document's bytes cannot give text, and never will: the run fails at once.

    ``kind`` is one of docpipe.extraction.UNREADABLE_KINDS (``encrypted``, ``corrupt``,
    ``format_mismatch``, ``too_many_pages``, ``decompression_bomb``, ``too_complex``,
    ``empty_text``).
    """

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.kind}: {super().__str__()}"


class RunStoppedError(DocpipeError):
    """The step's run is no longer active: its remaining calls are not sent."""


class BudgetExceededError(DocpipeError):
    """Spending reached the budget of the run or of its batch (``scope``)."""

    def __init__(self, message: str, *, scope: str) -> None:
        super().__init__(message)
        self.scope = scope


class NotFoundError(DocpipeError):
    pass


class _WithDetails(DocpipeError):
    """``details``: what the caller needs to act on the error (JSON), shown beside its
    one-line message (a stale review's current revision, an edit's per-field errors)."""

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class ConflictError(_WithDetails):
    pass


class InvalidRequestError(_WithDetails):
    pass


class WaitingForProviderBatch(DocpipeError):
    """A call of the step waits for its provider batch (docpipe.state.provider_batches): not
    a failure; the step parks in PostgreSQL until the poller wakes it with the answer."""
