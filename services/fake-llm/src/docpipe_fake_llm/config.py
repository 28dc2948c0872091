"""The provider's tunable behaviour: latency, rate limit and API key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["FakeLLMConfig", "parse_latency"]


@dataclass(frozen=True)
class FakeLLMConfig:
    """Start-up settings; ``rpm`` 0 means no rate limit, ``burst`` 0 one second's worth;
    ``request_log`` None: no request log (see stats.RequestLog)."""

    latency_ms: tuple[int, int] = (0, 0)
    rpm: int = 0
    burst: int = 0
    api_key: str | None = None
    request_log: Path | None = None

    def __post_init__(self) -> None:
        low, high = self.latency_ms
        if not 0 <= low <= high:
            raise ValueError(f"latency range must satisfy 0 <= low <= high, got {low}:{high}")
        if self.rpm < 0 or self.burst < 0:
            raise ValueError("rpm and burst must not be negative")


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
