"""What the API's process holds for its lifetime (:class:`Resources`), and who a request is
from (:class:`Caller`): the two things every action (docpipe_api.actions) is given."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import anyio
import redis
from starlette.requests import Request

from docpipe.broker.messages import Broker
from docpipe.extraction.page_images import RenderedPage
from docpipe.pipelines.catalog import Catalog
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.tenants import VerifiedKeys
from docpipe_api.heavy import Flights, HeavyWork
from docpipe_api.readiness import PostgresProbe
from docpipe_api.streams import StreamSlots

__all__ = ["Caller", "Resources", "resources_of"]


@dataclass(frozen=True)
class Resources:
    """Opened by the app's lifespan, closed when it ends."""

    settings: Settings
    database: Database
    broker: Broker
    redis: redis.Redis
    pipelines: Catalog
    # Batch bodies this process may hold at once (DOCPIPE_MAX_BATCH_BODIES_IN_FLIGHT).
    batch_bodies: anyio.Semaphore
    stream_slots: StreamSlots
    # Results exports this process may stream at once (DOCPIPE_MAX_RESULT_EXPORTS).
    export_slots: threading.Semaphore
    # Valid API keys this process saw in the last DOCPIPE_API_KEY_CACHE_S.
    verified_keys: VerifiedKeys
    # Heavy requests' work, off the event loop and bounded (DOCPIPE_MAX_HEAVY_REQUESTS) ...
    heavy: HeavyWork
    # ... and page images being rendered: one render per page at a time.
    page_renders: Flights[RenderedPage]
    # /readyz's own PostgreSQL connections.
    readiness: PostgresProbe


@dataclass(frozen=True)
class Caller:
    """Who asks: the tenant whose data the request may see and change, and the API key it
    came with (a bearer token or the key a person signed in to the pages with; None under
    DOCPIPE_AUTH=none). The key is what a review decision records as its reviewer."""

    tenant: str
    key_id: str | None = None


def resources_of(request: Request) -> Resources:
    """The process' resources (also the web pages' app's: the API's lifespan shares them)."""
    resources = request.app.state.docpipe
    assert isinstance(resources, Resources), "the app's lifespan has not run"
    return resources
