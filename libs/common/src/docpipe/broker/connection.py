"""The broker's Redis as a client of docpipe's own (queue inspection, the provider limiter,
the API's rate limit), every wait bounded: a Redis that stops answering (a crash without a
reset, packets dropped) costs a caller seconds, never a hang.

Celery's own connections get the same bounds through docpipe.broker.transport.
"""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from docpipe.settings import Settings

__all__ = ["redis_client"]


def redis_client(settings: Settings) -> redis.Redis:
    """A client of DOCPIPE_REDIS_URL: connecting gives up after redis_connect_timeout_s, a
    command's answer after redis_socket_timeout_s (redis.TimeoutError, a RedisError)."""
    return redis.Redis.from_url(
        settings.redis_url,
        socket_connect_timeout=settings.redis_connect_timeout_s,
        socket_timeout=settings.redis_socket_timeout_s,
        socket_keepalive=True,
        # redis-py retries 10 times by default, which turns one timeout into a minute. Here
        # a command is tried again once, at once, and only when its connection broke (a
        # pooled connection to a restarted server); a timeout is final.
        retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
    )
