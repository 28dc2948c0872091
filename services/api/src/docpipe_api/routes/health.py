"""Probes: /healthz says the process serves requests, /readyz that its dependencies answer."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.to_thread
import psycopg
import redis
from fastapi import APIRouter, Response

from docpipe_api.deps import RedisDep, SettingsDep
from docpipe_api.schemas import Health, Readiness

__all__ = ["CHECK_TIMEOUT_S", "router"]

router = APIRouter(tags=["health"])

CHECK_TIMEOUT_S = 2


@router.get("/healthz", response_model=Health, summary="Liveness: no I/O")
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: PostgreSQL answers SELECT 1 and Redis answers PING",
    responses={503: {"model": Readiness, "description": "A dependency did not answer"}},
)
async def readyz(settings: SettingsDep, broker_redis: RedisDep, response: Response) -> Readiness:
    def postgres() -> None:
        # A connection of its own, so the check is bounded even when the pool is exhausted.
        with psycopg.connect(
            settings.database_url,
            connect_timeout=CHECK_TIMEOUT_S,
            options=f"-c statement_timeout={CHECK_TIMEOUT_S * 1000}",
        ) as conn:
            conn.execute("SELECT 1")

    checks: dict[str, Callable[[], object]] = {"postgres": postgres, "redis": broker_redis.ping}
    results: dict[str, str] = {}

    async def run(name: str, check: Callable[[], object]) -> None:
        try:
            await anyio.to_thread.run_sync(check)
            results[name] = "ok"
        except (psycopg.Error, redis.RedisError, OSError) as exc:
            results[name] = f"{type(exc).__name__}: {exc}".strip()[:300]

    async with anyio.create_task_group() as tg:
        for name, check in checks.items():
            tg.start_soon(run, name, check)
    ready = all(result == "ok" for result in results.values())
    response.status_code = 200 if ready else 503
    return Readiness(
        status="ready" if ready else "unavailable", checks=dict(sorted(results.items()))
    )
