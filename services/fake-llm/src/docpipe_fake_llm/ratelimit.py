"""A token bucket shared by all completion requests, like a provider's per-key rate limit."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """Admits ``rpm`` requests per minute on average and at most ``burst`` at once."""

    def __init__(self, rpm: int, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rpm = rpm
        # Without an explicit burst, allow one second's worth of requests (at least one).
        self.capacity = float(burst if burst > 0 else max(1, math.ceil(rpm / 60)))
        self._rate = rpm / 60.0
        self._clock = clock
        self._tokens = self.capacity
        self._updated = clock()

    def acquire(self) -> float:
        """Take a token and return 0.0, or return the seconds until one is available."""
        if self.rpm <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self._rate)
        self._updated = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate
