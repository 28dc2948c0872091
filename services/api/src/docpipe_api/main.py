"""Wires the app: settings, resources opened for the app's lifetime, error handlers, routes.

Nothing connects at import: ``app`` reads its settings and opens PostgreSQL and Redis in
its lifespan, so ``uvicorn docpipe_api.main:app`` is configured by DOCPIPE_* variables.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import psycopg
from fastapi import Depends, FastAPI

from docpipe import __version__
from docpipe.broker.transport import CeleryPublisher, redis_client
from docpipe.extraction.page_images import RenderedPage
from docpipe.observability import tracing
from docpipe.pipelines.catalog import Catalog, load_catalog
from docpipe.settings import Settings, get_settings
from docpipe.state.db import Database
from docpipe.state.definitions import check_running_definitions
from docpipe.state.tenants import VerifiedKeys
from docpipe_api.auth import client_address_limited, current_tenant
from docpipe_api.errors import error_responses, install_error_handlers
from docpipe_api.heavy import Flights, HeavyWork
from docpipe_api.observability import install_observability, serving_metrics
from docpipe_api.openapi import describe_pipelines, serve_with_live_bounds
from docpipe_api.probes import serving_probes
from docpipe_api.readiness import PROBE_TIMEOUTS, PostgresProbe
from docpipe_api.resources import Resources
from docpipe_api.routes import (
    batches,
    dashboard,
    documents,
    evaluation_sets,
    evaluations,
    health,
    pipelines,
    results,
    reviews,
    runs,
    webhook_secrets,
)
from docpipe_api.streams import StreamSlots
from docpipe_api.transport_security import StrictTransportSecurity
from docpipe_api.ui import create_ui

__all__ = ["app", "create_app"]

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API; ``settings`` default to the DOCPIPE_* environment, read at start-up."""
    # The web pages, with their own middleware (session cookie, CSRF, CSP) and error pages;
    # they share the resources the lifespan opens.
    ui = create_ui()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = settings or get_settings()
        # A broken pipeline definition stops the API before it serves anything.
        catalog = load_catalog(resolved)
        describe_pipelines(app, catalog, resolved.provider_table.models)
        database = Database.from_settings(resolved)
        _check_definitions(database, catalog)
        broker_redis = redis_client(resolved)
        readiness = PostgresProbe(resolved.database_url, PROBE_TIMEOUTS, kept=health.PROBE_THREADS)
        app.state.docpipe = Resources(
            settings=resolved,
            database=database,
            broker=CeleryPublisher(),
            redis=broker_redis,
            pipelines=catalog,
            batch_bodies=anyio.Semaphore(resolved.max_batch_bodies_in_flight),
            stream_slots=StreamSlots(broker_redis, resolved.event_streams_per_key),
            export_slots=threading.Semaphore(resolved.max_result_exports),
            verified_keys=VerifiedKeys(resolved.api_key_cache_s),
            heavy=HeavyWork(resolved.max_heavy_requests),
            page_renders=Flights[RenderedPage](),
            readiness=readiness,
        )
        ui.state.docpipe = app.state.docpipe
        try:
            with serving_metrics(resolved):
                async with serving_probes(resolved):
                    yield
        finally:
            readiness.close()
            broker_redis.close()
            database.close()
            tracing.shutdown()

    app = FastAPI(
        title="docpipe",
        version=__version__,
        summary="Durable LLM extraction pipelines for contracts",
        lifespan=lifespan,
        # Operation ids are the route functions' names: stable, and what links name.
        generate_unique_id_function=lambda route: route.name,
    )
    install_error_handlers(app)
    serve_with_live_bounds(app, lambda: settings or get_settings())
    install_observability(app)
    app.add_middleware(StrictTransportSecurity)
    # Every route but the probes (and /docs, /openapi.json) is limited per client address
    # and then needs a tenant's API key; both checks run before the route reads its body.
    for router in (
        documents.router,
        runs.router,
        reviews.router,
        batches.router,
        dashboard.router,
        results.router,
        pipelines.router,
        webhook_secrets.router,
        evaluation_sets.router,
        evaluations.router,
    ):
        app.include_router(
            router,
            dependencies=[Depends(client_address_limited), Depends(current_tenant)],
            responses=error_responses(401, 429),
        )
    app.include_router(health.router)
    app.mount("/ui", ui)
    return app


def _check_definitions(database: Database, pipelines: Catalog) -> None:
    """Refuse to start on a definition that differs from the one active runs started with.
    An unreachable database is not a reason to refuse: ``docpipe migrate`` checks the same
    before a deploy, and a worker sends a run it cannot run as started to review."""
    try:
        check_running_definitions(database, pipelines)
    except psycopg.OperationalError as exc:
        log.warning("pipeline definitions not checked against active runs: %s", exc)


app = create_app()
