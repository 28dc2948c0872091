"""Redis: the broker, the provider limiter's and the API's counters (transport only)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from docpipe.settings.time_limits import Seconds, TimeLimitSettings

__all__ = ["BrokerSettings"]


class BrokerSettings(TimeLimitSettings):
    """Redis"""

    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0", description="the broker (transport only)"
    )
    # Redis (the broker, the provider limiter, the API's rate limit): connecting, and any
    # one command's answer.
    redis_connect_timeout_s: Seconds = Field(
        default=2.0, description="connecting to Redis (docpipe's clients and Celery's)"
    )
    redis_socket_timeout_s: Seconds = Field(
        default=5.0,
        description=(
            "one Redis command's answer (docpipe's clients and Celery's); every client timeout must"
            " be below `DOCPIPE_TASK_SOFT_TIME_LIMIT_S`"
        ),
    )

    @model_validator(mode="after")
    def _redis_waits_fit_in_a_step(self) -> Self:
        self.check_below_soft_limit(
            {
                "DOCPIPE_REDIS_CONNECT_TIMEOUT_S": self.redis_connect_timeout_s,
                "DOCPIPE_REDIS_SOCKET_TIMEOUT_S": self.redis_socket_timeout_s,
            },
            "a client waiting on Redis gives up before the soft limit interrupts its step",
        )
        return self
