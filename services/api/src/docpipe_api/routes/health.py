"""Probes: /healthz says the process serves requests, /readyz that it can take writes.

Readiness asks PostgreSQL only. Every write lands there (the outbox keeps the messages), and
beat's sweep publishes them once Redis is back; failing readiness on a Redis blip would
take every API pod out of service for something the API does not need. What went wrong is
logged, never returned: the probe answers anyone.
"""

from __future__ import annotations

import logging

import anyio.to_thread
import psycopg
from fastapi import APIRouter, Response

from docpipe.state.db import Timeouts
from docpipe_api.deps import SettingsDep
from docpipe_api.schemas import Health, Readiness

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])

_CHECK_TIMEOUT_S = 2
# A connection of the probe's own (bounded even when the pool is exhausted), every wait
# shorter than the kubelet's probe timeout.
_CHECK = Timeouts(
    connect_s=_CHECK_TIMEOUT_S,
    socket_s=_CHECK_TIMEOUT_S,
    statement_s=_CHECK_TIMEOUT_S,
    lock_s=_CHECK_TIMEOUT_S,
    pool_s=_CHECK_TIMEOUT_S,
)


@router.get("/healthz", response_model=Health, summary="Liveness: no I/O")
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: PostgreSQL answers SELECT 1 (Redis is not asked: writes wait in the "
    "outbox while it is down)",
    responses={503: {"model": Readiness, "description": "PostgreSQL did not answer"}},
)
async def readyz(settings: SettingsDep, response: Response) -> Readiness:
    def postgres() -> None:
        url = settings.database_url
        with psycopg.connect(url, **_CHECK.connection_kwargs(url)) as conn:
            conn.execute("SELECT 1")

    try:
        await anyio.to_thread.run_sync(postgres)
    except (psycopg.Error, OSError) as exc:
        log.warning("readiness: postgres did not answer: %s: %s", type(exc).__name__, exc)
        response.status_code = 503
        return Readiness(status="unavailable", checks={"postgres": "unavailable"})
    return Readiness(status="ready", checks={"postgres": "ok"})
