"""Retry delays: exponential with full jitter, capped, never earlier than Retry-After."""

from __future__ import annotations

import random

__all__ = ["retry_delay"]


def retry_delay(
    attempt: int,
    *,
    base_s: float,
    cap_s: float,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1).

    Full jitter (uniform between 0 and ``min(cap, base * 2**(attempt-1))``) spreads a crowd of
    failed calls over the whole window, so they do not return to the provider together. A
    provider's Retry-After is a floor: the jittered delay is added on top of it, so that many
    callers told "1 s" do not all come back at the same instant either.
    """
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    ceiling = min(cap_s, base_s * 2 ** min(attempt - 1, 62))
    jitter = (rng or random).uniform(0.0, ceiling)
    if retry_after_s is None:
        return jitter
    return min(retry_after_s + jitter, max(cap_s, retry_after_s))
