"""Wires the fake provider's routes into one FastAPI application."""

from __future__ import annotations

from fastapi import FastAPI

from docpipe_fake_llm import completions, control
from docpipe_fake_llm.config import FakeLLMConfig
from docpipe_fake_llm.provider import FakeProvider

__all__ = ["create_app"]


def create_app(config: FakeLLMConfig | None = None) -> FastAPI:
    """Return an app whose state starts from ``config`` (defaults: no latency, no limits)."""
    app = FastAPI(title="docpipe fake LLM", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.provider = FakeProvider(config or FakeLLMConfig())
    app.include_router(completions.router)
    app.include_router(control.router)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
