"""Replies shared by the provider's routes: JSON bodies, rate-limit refusals, and waiting
on a client that may go away."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from fastapi import Response
from starlette.types import Receive

from docpipe_fake_llm.protocol import error_body

__all__ = ["client_left_within", "json_response", "rate_limited"]


def rate_limited(
    wait_s: float, message: str, code: str, headers: dict[str, str] | None = None
) -> Response:
    response = json_response(429, error_body(message, "rate_limit_error", code))
    response.headers.update(headers or {})
    response.headers["Retry-After"] = str(max(1, math.ceil(wait_s)))
    response.headers["retry-after-ms"] = str(math.ceil(wait_s * 1000))
    return response


async def client_left_within(receive: Receive, seconds: float) -> bool:
    """Wait ``seconds``, or less if the client disconnects first; say whether it did."""

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({watcher}, timeout=seconds)
        return bool(done)
    finally:
        watcher.cancel()


def json_response(status: int, body: dict[str, Any]) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json")
