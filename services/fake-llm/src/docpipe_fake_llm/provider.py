"""The provider's mutable state: current settings, rate limiter, pending faults and counters."""

from __future__ import annotations

import dataclasses
import hmac
import json
import random
from typing import Any

from docpipe_fake_llm.answers import completion_for
from docpipe_fake_llm.batch_faults import PointFaults
from docpipe_fake_llm.batch_store import BatchStore, StoreTimings
from docpipe_fake_llm.billing import Billing
from docpipe_fake_llm.config import FakeLLMConfig
from docpipe_fake_llm.faults import FaultQueue
from docpipe_fake_llm.mistakes import Mistakes
from docpipe_fake_llm.protocol import ProtocolError, error_body, parse_chat_request
from docpipe_fake_llm.ratelimit import Limits
from docpipe_fake_llm.reader import StepInputError
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
        self.mistakes: Mistakes = config.mistakes
        # Kept by reset(): it records the whole life of the file, across restarts too.
        self.request_log = RequestLog(config.request_log)
        self.billing = self._new_billing()
        self.batch_faults = PointFaults()
        self.batches = self._new_batches()

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
        self.mistakes = self.startup_config.mistakes
        self.billing = self._new_billing()
        self.batch_faults = PointFaults()
        self.batches = self._new_batches()

    def answer_batch_request(
        self, body: dict[str, Any], fault: str | None
    ) -> tuple[int, dict[str, Any]]:
        """What one request of a batch is answered: as a completion request of its own
        would be (status and body), without its rate limit or latency."""
        try:
            chat = parse_chat_request(json.dumps(body).encode())
            return 200, completion_for(chat, self.mistakes, fault)
        except ProtocolError as error:
            return error.status, error.body()
        except StepInputError as error:
            return 400, error_body(str(error), "invalid_request_error", error.code)

    def batch_timings(self) -> StoreTimings:
        return StoreTimings(
            completion_s=self.config.batch_completion_s, window_s=self.config.batch_window_s
        )

    def _new_billing(self) -> Billing:
        return Billing(self.config.prices, self.config.batch_discount)

    def _new_batches(self) -> BatchStore:
        return BatchStore(
            self.answer_batch_request, self.billing, self.request_log, self.batch_timings
        )

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
            "batch_completion_s": self.config.batch_completion_s,
            "batch_window_s": self.config.batch_window_s,
            "batch_max_requests": self.config.batch_max_requests,
            "batch_max_bytes": self.config.batch_max_bytes,
        }

    def _apply(self, config: FakeLLMConfig) -> None:
        self.config = config
        self.limits = _limits(config)


def _limit_values(config: FakeLLMConfig) -> tuple[Any, ...]:
    return (config.rpm, config.burst, config.tpm, config.model_limits)


def _limits(config: FakeLLMConfig) -> Limits:
    return Limits(config.rpm, config.burst, config.tpm, config.model_limits)
