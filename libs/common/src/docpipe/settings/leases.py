"""Leases and recovery: how a step is held by one worker, and how beat hands on what a dead
or cut-off worker held and re-sends what Redis lost."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, Field, model_validator

from docpipe.settings.time_limits import Seconds

__all__ = ["LeaseSettings"]


class LeaseSettings(BaseModel):
    """Leases and recovery"""

    # A dead worker's step is handed on at its next claim or within reaper_interval_s (its
    # lease session ended); a worker cut off loses its steps within lease_ttl_s +
    # reaper_interval_s (docs: concepts/leases).
    lease_ttl_s: Seconds = Field(default=8.0, description="a step's lease; renewed every heartbeat")
    heartbeat_interval_s: Seconds = Field(
        default=2.0, description="lease renewal period (at most half the TTL)"
    )
    reaper_interval_s: Seconds = Field(
        default=1.0,
        description=(
            "beat's recovery pass: hands on the steps of dead and cut-off workers, re-sends lost "
            "messages, ends runs past their deadline"
        ),
    )
    session_leases: bool = Field(
        default=True,
        description=(
            "tie each lease to the worker process' own PostgreSQL session, so a dead worker's "
            "step is handed on at once (false: the TTL alone; see "
            "[Leases](../concepts/leases.md))"
        ),
    )
    lease_database_url: str = Field(
        default="",
        description=(
            "where that session connects (empty: `DOCPIPE_DATABASE_URL`); behind PgBouncer in "
            "transaction mode, PostgreSQL itself or a session-mode pool (from a Secret, like "
            "the database URL)"
        ),
    )
    redrive_grace_s: Seconds = Field(
        default=5.0,
        description="a pending step whose message left the queue this long ago is re-sent",
    )
    outbox_sweep_interval_s: Seconds = Field(default=1.0, description="beat's outbox sweep")
    outbox_grace_s: Seconds = Field(
        default=2.0, description="rows older than this that are unpublished are swept"
    )

    @model_validator(mode="after")
    def _heartbeats_keep_leases(self) -> Self:
        if not self.heartbeat_interval_s * 2 <= self.lease_ttl_s:
            raise ValueError(
                f"DOCPIPE_HEARTBEAT_INTERVAL_S={self.heartbeat_interval_s:g} must be at most half "
                f"of DOCPIPE_LEASE_TTL_S={self.lease_ttl_s:g}, or one late heartbeat loses a "
                f"live worker's lease"
            )
        return self
