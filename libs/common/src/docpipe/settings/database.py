"""PostgreSQL: where it is, the process' pool, and how long any wait on it may last."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from docpipe.settings.time_limits import Seconds, TimeLimitSettings

__all__ = ["DatabaseSettings"]


class DatabaseSettings(TimeLimitSettings):
    """PostgreSQL"""

    database_url: str = Field(
        default="postgresql://postgres@127.0.0.1:5432/docpipe",
        description="PostgreSQL (state, results)",
    )
    database_pool_size: int = Field(default=4, ge=1, le=100, description="connections per process")
    database_prepared_statements: bool = Field(
        default=True,
        description=(
            "named queries as server-side prepared statements (each parsed and planned once per "
            "connection); `false` behind a pooler that cannot keep them (PgBouncer in transaction "
            "mode before 1.21, or without `max_prepared_statements`)"
        ),
    )
    # Every client gives up instead of hanging on a server that stops answering (a crashed
    # node, packets dropped without a reset); see the docs, Security > "Outages and timeouts".
    database_connect_timeout_s: int = Field(
        default=5, ge=2, le=600, description="connecting to PostgreSQL (whole seconds, at least 2)"
    )
    database_socket_timeout_s: Seconds = Field(
        default=10.0,
        description=(
            "a PostgreSQL connection whose sent data stays unacknowledged, or whose peer stops "
            "answering keepalives, this long is closed (libpq `tcp_user_timeout` and keepalives: a "
            "server that drops packets sends no reset)"
        ),
    )
    database_statement_timeout_s: Seconds = Field(
        default=15.0, description="PostgreSQL cancels a statement after this (`statement_timeout`)"
    )
    database_lock_timeout_s: Seconds = Field(
        default=5.0,
        description=(
            "a statement gives up waiting for a lock after this (`lock_timeout`; at most the "
            "statement timeout)"
        ),
    )
    database_pool_timeout_s: Seconds = Field(
        default=10.0, description="waiting for a free connection of the process' pool"
    )

    @model_validator(mode="after")
    def _database_waits_fit_in_a_step(self) -> Self:
        self.check_below_soft_limit(
            {
                "DOCPIPE_DATABASE_CONNECT_TIMEOUT_S": self.database_connect_timeout_s,
                "DOCPIPE_DATABASE_SOCKET_TIMEOUT_S": self.database_socket_timeout_s,
                "DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S": self.database_statement_timeout_s,
                "DOCPIPE_DATABASE_POOL_TIMEOUT_S": self.database_pool_timeout_s,
            },
            "a client waiting on PostgreSQL gives up before the soft limit interrupts its step",
        )
        if self.database_lock_timeout_s > self.database_statement_timeout_s:
            raise ValueError(
                f"DOCPIPE_DATABASE_LOCK_TIMEOUT_S={self.database_lock_timeout_s:g} must not "
                f"exceed DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S="
                f"{self.database_statement_timeout_s:g}: a lock is waited for inside a statement"
            )
        return self
