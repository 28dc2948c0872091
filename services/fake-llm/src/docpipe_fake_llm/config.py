"""The provider's tunable behaviour: latency, rate limits and API key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DEFAULT_MODELS", "FakeLLMConfig", "parse_latency", "parse_model_limit"]

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
