"""The provider's mutable state: current settings, rate limiter, pending faults and counters."""

from __future__ import annotations

import dataclasses
import hmac
import random
from typing import Any

from docpipe_fake_llm.config import FakeLLMConfig
from docpipe_fake_llm.faults import FaultQueue
from docpipe_fake_llm.ratelimit import Limits
from docpipe_fake_llm.stats import RequestLog, Stats

__all__ = ["FakeProvider"]


class FakeProvider:
    """Everything a request may read or change; one per app, used from one event loop only."""

    def __init__(self, config: FakeLLMConfig) -> None:
        self.startup_config = config
        self.config = config
        self.limits = _limits(config)
        self.faults = FaultQueue()
        self.stats = Stats()
        # Kept by reset(): it records the whole life of the file, across restarts too.
        self.request_log = RequestLog(config.request_log)

    def reconfigure(self, **changes: Any) -> None:
        """Change ``latency_ms``, the limits or ``rate_headers``; changed limits start full."""
        config = dataclasses.replace(self.config, **changes)
        if _limit_values(config) == _limit_values(self.config):
            self.config = config
        else:
            self._apply(config)

    def reset(self) -> None:
        """Return to the start-up settings with no pending faults and zeroed counters."""
        self._apply(self.startup_config)
        self.faults = FaultQueue()
        self.stats = Stats()

    def is_authorized(self, authorization: str | None) -> bool:
        if self.config.api_key is None:
            return True
        expected = f"Bearer {self.config.api_key}".encode()
        return hmac.compare_digest((authorization or "").encode(), expected)

    def latency_s(self) -> float:
        low, high = self.config.latency_ms
        return random.uniform(low, high) / 1000 if high else 0.0

    def settings(self) -> dict[str, Any]:
        return {
            "latency_ms": list(self.config.latency_ms),
            "rpm": self.config.rpm,
            "burst": self.config.burst,
            "tpm": self.config.tpm,
            "model_limits": {m: list(v) for m, v in self.config.model_limits.items()},
            "rate_headers": self.config.rate_headers,
        }

    def _apply(self, config: FakeLLMConfig) -> None:
        self.config = config
        self.limits = _limits(config)


def _limit_values(config: FakeLLMConfig) -> tuple[Any, ...]:
    return (config.rpm, config.burst, config.tpm, config.model_limits)


def _limits(config: FakeLLMConfig) -> Limits:
    return Limits(config.rpm, config.burst, config.tpm, config.model_limits)
