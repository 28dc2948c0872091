"""Wires the fake provider's routes into one FastAPI application, with the ticker that moves
its batches along (docpipe_fake_llm.batch_store)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from docpipe_fake_llm import anthropic_batches, completions, control, openai_batches
from docpipe_fake_llm.config import FakeLLMConfig
from docpipe_fake_llm.provider import FakeProvider

__all__ = ["create_app"]

# How often the batches move on: processing their due requests, ending them.
_TICK_S = 0.05


def create_app(config: FakeLLMConfig | None = None) -> FastAPI:
    """Return an app whose state starts from ``config`` (defaults: no latency, no limits)."""
    provider = FakeProvider(config or FakeLLMConfig())

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        ticker = asyncio.create_task(_tick(provider))
        try:
            yield
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker

    app = FastAPI(
        title="docpipe fake LLM",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    app.state.provider = provider
    app.include_router(completions.router)
    app.include_router(openai_batches.router)
    app.include_router(anthropic_batches.router)
    app.include_router(control.router)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def _tick(provider: FakeProvider) -> None:
    """Move the batches on, a bounded slice of work at a time (requests keep being answered
    in between)."""
    while True:
        provider.batches.tick()
        await asyncio.sleep(_TICK_S)
