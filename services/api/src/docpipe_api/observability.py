"""The API's metrics and traces: a duration histogram per route, served at ``/metrics`` on a
port of its own (DOCPIPE_METRICS_PORT, like the workers'; never on the public port, where
any client could read tenants' figures, and which a NetworkPolicy cannot close to
everyone but the monitoring namespace without closing the API too), and OpenTelemetry for
requests when the ``OTEL_*`` environment asks for it (see docpipe.observability.tracing; the
request span's traceparent is stored with each run it creates)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from docpipe.observability import metrics, tracing
from docpipe.settings import Settings
from docpipe_api.middleware import HttpMiddleware

__all__ = ["install_observability", "serving_metrics"]


def install_observability(app: FastAPI) -> None:
    """Add the request histogram and (when configured) tracing to ``app``."""
    app.add_middleware(RequestDuration)
    if tracing.configure("docpipe-api"):
        tracing.instrument_fastapi(app)


@contextmanager
def serving_metrics(settings: Settings) -> Iterator[None]:
    """``/metrics`` at DOCPIPE_METRICS_HOST:DOCPIPE_METRICS_PORT (0: off) while the app runs."""
    server = metrics.serve_metrics(
        settings.metrics_port, settings.metrics_host, metrics.exposition_registry()
    )
    try:
        yield
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


class RequestDuration(HttpMiddleware):
    """ASGI middleware: ``docpipe_http_request_duration_seconds{method, route, status_code}``,
    labelled by the route's template (``/runs/{run_id}``), never the raw path."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            template = getattr(route, "path", None)
            # A mounted app's route (the web pages') is relative to its mount: "/ui" + path,
            # so that /ui/runs/{run_id} is not counted as the API's /runs/{run_id}.
            mount = str(scope.get("root_path", ""))[len(str(scope.get("app_root_path", ""))) :]
            template = f"{mount}{template}" if template else "unmatched"
            metrics.metrics().http_request_duration.labels(
                scope["method"], template, str(status)
            ).observe(time.perf_counter() - started)
