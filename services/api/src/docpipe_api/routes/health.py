"""Probes: /healthz says the process serves requests, /readyz that it can take writes.

These are the API's own, answered on its event loop, so behind whatever tenants' requests
hold it; the kubelet asks a process of their own at DOCPIPE_PROBE_PORT instead
(docpipe_api.probe_server), which answers from this loop's heartbeat.

Within the loop, neither waits for tenants' threads: /healthz does no I/O, and /readyz asks
PostgreSQL on connections and in threads of its own (never the default thread pool that
tenants' requests share, nor the heavy requests' threads). Its connections stay open
between probes (docpipe_api.readiness): opening one for each probe was most of its time.

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

from docpipe_api.deps import ResourcesDep
from docpipe_api.schemas import HealthOut, ReadinessOut

__all__ = ["PROBE_THREADS", "router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])

# Probes at once: the kubelet's and a person's. More wait for these, not for tenants' work.
PROBE_THREADS = 2


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
