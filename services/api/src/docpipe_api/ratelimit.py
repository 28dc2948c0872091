"""Request limits per minute, per client address and per API key: a fixed one-minute window
counted in Redis, shared by every API replica. One atomic MULTI (INCR + EXPIRE) per request
and limit; the counter expires by itself.

A fixed window lets a client send up to twice its limit across a window boundary; that is
the price of one round trip and no clock-sensitive arithmetic, and fine for a guard
against runaway clients (the provider's own limit is enforced by docpipe.providers.limiter).
"""

from __future__ import annotations

import logging
import math
import time

import redis
from fastapi import HTTPException

__all__ = ["WINDOW_S", "enforce_rate_limit"]

log = logging.getLogger(__name__)

WINDOW_S = 60


def enforce_rate_limit(client: redis.Redis, subject: str, limit: int, *, who: str) -> None:
    """Count one request of ``subject`` ("key:<id>", "ip:<address>"); 429 with Retry-After
    once this window's count exceeds ``limit``, saying ``who`` sent too many. Redis being
    down lets the request through (and says so in the log): the limit protects the service,
    it must not take it down."""
    now = time.time()
    window = int(now // WINDOW_S)
    counter = f"docpipe:api-rate:{subject}:{window}"
    try:
        with client.pipeline(transaction=True) as pipe:
            pipe.incr(counter)
            pipe.expire(counter, 2 * WINDOW_S)
            count, _ = pipe.execute()
    except redis.RedisError as exc:
        log.warning("rate limit not checked for %s: %s", subject, type(exc).__name__)
        return
    if int(count) > limit:
        retry_after = max(1, math.ceil((window + 1) * WINDOW_S - now))
        raise HTTPException(
            429,
            f"{who} made more than {limit} requests this minute; retry in {retry_after} s",
            headers={"Retry-After": str(retry_after)},
        )
