"""The provider's tunable behaviour: latency, rate limits and API key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from docpipe_fake_llm.billing import DEFAULT_PRICES
from docpipe_fake_llm.mistakes import Mistakes

__all__ = [
    "DEFAULT_MODELS",
    "FakeLLMConfig",
    "parse_error_rate",
    "parse_latency",
    "parse_model_limit",
]

# What GET /v1/models lists (any model name is answered, as llama.cpp's server does).
DEFAULT_MODELS = ("gpt-4o-mini", "gpt-4o")


@dataclass(frozen=True)
class FakeLLMConfig:
    """Start-up settings; ``rpm``/``tpm`` 0 mean no limit, ``burst`` 0 one second's worth.
    ``model_limits`` gives models limits of their own: {model: (rpm, tpm)};
    ``request_log`` None: no request log (see stats.RequestLog)."""

    latency_ms: tuple[int, int] = (0, 0)
    rpm: int = 0
    burst: int = 0
    api_key: str | None = None
    tpm: int = 0
    model_limits: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Send x-ratelimit-* headers with every answer, as OpenAI does.
    rate_headers: bool = True
    models: tuple[str, ...] = DEFAULT_MODELS
    request_log: Path | None = None
    # Wrong on purpose (docpipe_fake_llm.mistakes): none by default.
    mistakes: Mistakes = field(default_factory=Mistakes)
    # What answers are billed (USD per million tokens, input and output), batches at a discount.
    prices: Mapping[str, tuple[Decimal, Decimal]] = field(default_factory=lambda: DEFAULT_PRICES)
    batch_discount: Decimal = Decimal("0.5")
    # The batch interfaces (docpipe_fake_llm.batch_store): how long a batch's requests take
    # to process, its completion window (None: what the batch asked for, 24 h for Anthropic's),
    # and the most requests and bytes one batch may hold.
    batch_completion_s: float = 5.0
    batch_window_s: float | None = None
    batch_max_requests: int = 50_000
    batch_max_bytes: int = 200 * 1024 * 1024

    def __post_init__(self) -> None:
        low, high = self.latency_ms
        if not 0 <= low <= high:
            raise ValueError(f"latency range must satisfy 0 <= low <= high, got {low}:{high}")
        limits = [
            self.rpm,
            self.burst,
            self.tpm,
            *(v for p in self.model_limits.values() for v in p),
        ]
        if any(v < 0 for v in limits):
            raise ValueError("rate limits must not be negative")
        if self.batch_completion_s < 0 or (self.batch_window_s or 1) <= 0:
            raise ValueError("a batch's completion delay and window must be positive")
        if self.batch_max_requests < 1 or self.batch_max_bytes < 1:
            raise ValueError("a batch's limits must be at least 1")
        if not 0 <= self.batch_discount <= 1:
            raise ValueError("the batch discount is a share from 0 to 1")


def parse_latency(text: str) -> tuple[int, int]:
    """Return ``"300:1500"`` as ``(300, 1500)`` and ``"200"`` as ``(200, 200)``."""
    low, _, high = text.partition(":")
    try:
        bounds = (int(low), int(high or low))
    except ValueError:
        raise ValueError(f"latency must look like LOW:HIGH in milliseconds, got {text!r}") from None
    if not 0 <= bounds[0] <= bounds[1]:
        raise ValueError(f"latency range must satisfy 0 <= low <= high, got {text!r}")
    return bounds


def parse_model_limit(text: str) -> tuple[str, tuple[int, int]]:
    """Return ``"gpt-4o=300:40000"`` as ``("gpt-4o", (300, 40000))`` (rpm:tpm, 0: none)."""
    model, _, limits = text.partition("=")
    rpm, _, tpm = limits.partition(":")
    try:
        pair = (int(rpm or 0), int(tpm or 0))
    except ValueError:
        raise ValueError(f"a model limit looks like MODEL=RPM:TPM, got {text!r}") from None
    if not model or min(pair) < 0:
        raise ValueError(f"a model limit looks like MODEL=RPM:TPM, got {text!r}")
    return model, pair


def parse_error_rate(text: str) -> tuple[str, float]:
    """Return ``"gpt-4o-mini=0.2"`` as ``("gpt-4o-mini", 0.2)`` (a model or a prompt
    version, and the share of its values to get wrong)."""
    selector, _, rate = text.partition("=")
    try:
        share = float(rate)
    except ValueError:
        share = -1.0
    if not selector or not 0 <= share <= 1:
        raise ValueError(f"an error rate looks like MODEL_OR_PROMPT_VERSION=0.2, got {text!r}")
    return selector, share
