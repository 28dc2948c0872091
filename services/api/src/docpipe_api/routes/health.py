"""Probes: /healthz says the process serves requests, /readyz that it can take writes.

Neither waits behind tenants' work: /healthz does no I/O, and /readyz asks PostgreSQL on
connections and in threads of its own (never the default thread pool that tenants' requests
share, nor the heavy requests' threads), so a flood of heavy requests leaves the probes
answering. Its connections stay open between probes (docpipe_api.readiness): opening one
for each probe was most of a probe's time.

Readiness asks PostgreSQL only. Every write lands there (the outbox keeps the messages), and
beat's sweep publishes them once Redis is back; failing readiness on a Redis blip would
take every API pod out of service for something the API does not need. What went wrong is
logged, never returned: the probe answers anyone.
"""

from __future__ import annotations

import logging
from functools import cache

import anyio
import anyio.to_thread
import psycopg
from fastapi import APIRouter, Response

from docpipe.state.db import Timeouts
from docpipe_api.deps import ResourcesDep
from docpipe_api.schemas import HealthOut, ReadinessOut

__all__ = ["PROBE_THREADS", "PROBE_TIMEOUTS", "router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])

_CHECK_TIMEOUT_S = 2
# Probes at once: the kubelet's and a person's. More wait for these, not for tenants' work.
PROBE_THREADS = 2
# Connections of the probes' own (bounded even when the pool is exhausted), every wait
# shorter than the kubelet's probe timeout.
PROBE_TIMEOUTS = Timeouts(
    connect_s=_CHECK_TIMEOUT_S,
    socket_s=_CHECK_TIMEOUT_S,
    statement_s=_CHECK_TIMEOUT_S,
    lock_s=_CHECK_TIMEOUT_S,
    pool_s=_CHECK_TIMEOUT_S,
)


@router.get("/healthz", response_model=HealthOut, summary="Liveness: no I/O")
async def healthz() -> HealthOut:
    return HealthOut()


@router.get(
    "/readyz",
    response_model=ReadinessOut,
    summary="Readiness: PostgreSQL answers SELECT 1 (Redis is not asked: writes wait in the "
    "outbox while it is down)",
    responses={503: {"model": ReadinessOut, "description": "PostgreSQL did not answer"}},
)
async def readyz(resources: ResourcesDep, response: Response) -> ReadinessOut:
    try:
        await anyio.to_thread.run_sync(resources.readiness.select_one, limiter=_probe_threads())
    except (psycopg.Error, OSError) as exc:
        log.warning("readiness: postgres did not answer: %s: %s", type(exc).__name__, exc)
        response.status_code = 503
        return ReadinessOut(status="unavailable", checks={"postgres": "unavailable"})
    return ReadinessOut(status="ready", checks={"postgres": "ok"})


@cache
def _probe_threads() -> anyio.CapacityLimiter:
    # Made on first use, inside the event loop it belongs to.
    return anyio.CapacityLimiter(PROBE_THREADS)
