"""The API's metrics and traces: ``/metrics`` on the API's own port, a duration histogram per
route, and OpenTelemetry for requests when the ``OTEL_*`` environment asks for it (see
docpipe.observability.tracing; the request span's traceparent is stored with each run it
creates)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docpipe.observability import metrics, tracing

__all__ = ["install_observability"]


def install_observability(app: FastAPI) -> None:
    """Add the request histogram, ``GET /metrics`` and (when configured) tracing to ``app``."""
    registry = metrics.exposition_registry()

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(RequestDuration)
    if tracing.configure("docpipe-api"):
        tracing.instrument_fastapi(app)


class RequestDuration:
    """ASGI middleware: ``docpipe_http_request_duration_seconds{method, route, status_code}``,
    labelled by the route's template (``/runs/{run_id}``), never the raw path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_recording_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_recording_status)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            if template != "/metrics":
                metrics.metrics().http_request_duration.labels(
                    scope["method"], template, str(status)
                ).observe(time.perf_counter() - started)
