"""The probes' own cost in the API: /healthz and /readyz called through the whole ASGI app
(its middleware, routing, dependencies, /readyz's thread and PostgreSQL) in this process,
with no HTTP and no client. Beside the probes timed over HTTP it tells where a probe's time
goes: in the app, or in the connection, the client and the machine's scheduling."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from fastapi import FastAPI
from starlette.types import Message

from bench.harness import percentile
from docpipe.settings import Settings
from docpipe_api.main import create_app

__all__ = ["probes_in_process"]

_PATHS = ("/healthz", "/readyz")
_WARM_UP = 20


def probes_in_process(settings: Settings, rounds: int = 300) -> dict[str, Any]:
    """p50, p99 and max (ms) of ``rounds`` calls of each probe, one at a time, after a
    warm-up; the load average (1 min) when they ended."""
    app = create_app(settings)

    async def measure() -> dict[str, Any]:
        figures: dict[str, Any] = {}
        async with app.router.lifespan_context(app):
            for path in _PATHS:
                for _ in range(_WARM_UP):
                    await _call(app, path)
                seconds = [await _call(app, path) for _ in range(rounds)]
                figures[path] = {
                    "p50_ms": round(percentile(seconds, 50) * 1000, 2),
                    "p99_ms": round(percentile(seconds, 99) * 1000, 2),
                    "max_ms": round(max(seconds) * 1000, 2),
                }
        return {"calls": rounds, "by_path": figures, "load_1m": round(os.getloadavg()[0], 1)}

    return asyncio.run(measure())


async def _call(app: FastAPI, path: str) -> float:
    """Seconds the app took to answer ``GET path`` (AssertionError unless 200)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"bench")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    statuses = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    started = time.perf_counter()
    await app(scope, receive, send)
    seconds = time.perf_counter() - started
    assert statuses == [200], (path, statuses)
    return seconds
