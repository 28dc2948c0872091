"""Wires the app: settings, resources opened for the app's lifetime, error handlers, routes.

Nothing connects at import: ``app`` reads its settings and opens PostgreSQL and Redis in
its lifespan, so ``uvicorn docpipe_api.main:app`` is configured by DOCPIPE_* variables.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from docpipe.broker.connection import redis_client
from docpipe.broker.transport import CeleryPublisher
from docpipe.observability import tracing
from docpipe.settings import Settings, get_settings
from docpipe.state.db import Database
from docpipe_api.deps import Resources, current_tenant
from docpipe_api.errors import error_responses, install_error_handlers
from docpipe_api.observability import install_observability, serving_metrics
from docpipe_api.routes import batches, documents, health, runs

__all__ = ["app", "create_app"]


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API; ``settings`` default to the DOCPIPE_* environment, read at start-up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = settings or get_settings()
        database = Database.from_settings(resolved)
        broker_redis = redis_client(resolved)
        app.state.docpipe = Resources(
            settings=resolved, database=database, broker=CeleryPublisher(), redis=broker_redis
        )
        try:
            with serving_metrics(resolved):
                yield
        finally:
            broker_redis.close()
            database.close()
            tracing.shutdown()

    app = FastAPI(
        title="docpipe",
        version="0.1.0",
        summary="Durable LLM extraction pipelines for contracts",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    install_observability(app)
    # Every route but the probes (and /docs, /openapi.json) needs a tenant's API key; the
    # check runs before the route reads its body.
    for router in (documents.router, runs.router, batches.router):
        app.include_router(
            router, dependencies=[Depends(current_tenant)], responses=error_responses(401, 429)
        )
    app.include_router(health.router)
    return app


app = create_app()
