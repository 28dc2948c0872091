"""Token buckets like a provider's limits: requests and tokens per minute, for the whole key
and per model, with the ``x-ratelimit-*`` headers OpenAI sends describing them.

A request is charged one request and its prompt tokens plus its ``max_tokens`` when it is
admitted (as OpenAI counts it); once answered, the output tokens it did not use are given
back, so the tokens bucket ends up charged with the request's real usage.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

__all__ = ["Limits", "TokenBucket", "format_duration"]


class TokenBucket:
    """Admits ``per_minute`` units per minute on average and at most ``capacity`` at once."""

    def __init__(
        self,
        per_minute: int,
        capacity: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self.capacity = float(capacity)
        self._rate = per_minute / 60.0
        self._clock = clock
        self._tokens = self.capacity
        self._updated = clock()

    @classmethod
    def requests(
        cls, rpm: int, burst: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> TokenBucket:
        # Without an explicit burst, one second's worth of requests (at least one).
        return cls(rpm, burst if burst > 0 else max(1, math.ceil(rpm / 60)), clock)

    @classmethod
    def tokens(cls, tpm: int, clock: Callable[[], float] = time.monotonic) -> TokenBucket:
        return cls(tpm, tpm, clock)  # a minute's worth, as providers' token limits allow

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self._rate)
        self._updated = now

    def wait_for(self, cost: float = 1.0) -> float:
        """0.0 if ``cost`` units are there now, else the seconds until they are."""
        if self.per_minute <= 0:
            return 0.0
        self._refill()
        cost = min(cost, self.capacity)
        return 0.0 if self._tokens >= cost else (cost - self._tokens) / self._rate

    def take(self, cost: float = 1.0) -> None:
        if self.per_minute > 0:
            self._refill()
            self._tokens -= min(cost, self.capacity)

    def give_back(self, units: float) -> None:
        if self.per_minute > 0:
            self._refill()
            self._tokens = min(self.capacity, self._tokens + units)

    def acquire(self) -> float:
        """Take one unit and return 0.0, or return the seconds until one is available."""
        wait = self.wait_for(1.0)
        if wait == 0:
            self.take(1.0)
        return wait

    def remaining(self) -> int:
        self._refill()
        return max(0, math.floor(self._tokens))

    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        self._refill()
        return (self.capacity - self._tokens) / self._rate if self._rate else 0.0


class Limits:
    """The key's buckets and each limited model's; a model without its own uses the key's."""

    def __init__(
        self,
        rpm: int,
        burst: int,
        tpm: int,
        model_limits: Mapping[str, tuple[int, int]],
    ) -> None:
        self.key = (TokenBucket.requests(rpm, burst), TokenBucket.tokens(tpm))
        self.models = {
            name: (TokenBucket.requests(m_rpm), TokenBucket.tokens(m_tpm))
            for name, (m_rpm, m_tpm) in model_limits.items()
        }

    def _buckets(self, model: str) -> list[tuple[TokenBucket, TokenBucket]]:
        return [self.key, *([self.models[model]] if model in self.models else [])]

    def admit(self, model: str, tokens: int) -> float:
        """Charge one request and ``tokens`` and return 0.0, or return the seconds to wait
        (nothing charged) when any bucket lacks them."""
        buckets = self._buckets(model)
        wait = max(max(r.wait_for(1), t.wait_for(tokens)) for r, t in buckets)
        if wait == 0:
            for requests, token_bucket in buckets:
                requests.take(1)
                token_bucket.take(tokens)
        return wait

    def settle(self, model: str, unused_tokens: int) -> None:
        """Give back the tokens an answered request reserved but did not use."""
        if unused_tokens > 0:
            for _, tokens in self._buckets(model):
                tokens.give_back(unused_tokens)

    def headers(self, model: str) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers for the limits that bind ``model``."""
        requests, tokens = self.models.get(model, self.key)
        out: dict[str, str] = {}
        for name, bucket in (("requests", requests), ("tokens", tokens)):
            if bucket.per_minute > 0:
                out[f"x-ratelimit-limit-{name}"] = str(bucket.per_minute)
                out[f"x-ratelimit-remaining-{name}"] = str(bucket.remaining())
                out[f"x-ratelimit-reset-{name}"] = format_duration(bucket.reset_s())
        return out


def format_duration(seconds: float) -> str:
    """OpenAI's spelling of a duration: ``"120ms"``, ``"1.5s"``, ``"6m0s"``."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.0f}s" if minutes else f"{rest:.3g}s"
