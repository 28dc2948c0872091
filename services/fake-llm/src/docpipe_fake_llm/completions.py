"""``POST /v1/chat/completions``: auth, validation, rate limit, faults, latency, then the answer.

Rate limiting comes before fault injection and latency, as at a real provider: a throttled
request costs nothing and consumes no fault.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.types import Receive

from docpipe_fake_llm.faults import DEFAULT_HANG_S, DEFAULT_RETRY_AFTER_S, Fault, broken_content
from docpipe_fake_llm.protocol import (
    ProtocolError,
    completion_body,
    error_body,
    parse_chat_request,
)
from docpipe_fake_llm.provider import FakeProvider
from docpipe_fake_llm.reader import StepInputError, answer_step

__all__ = ["router"]

router = APIRouter()

CLIENT_CLOSED_REQUEST = 499  # recorded when a client gives up on a hanging request


@router.post("/v1/chat/completions")
async def create_chat_completion(request: Request) -> Response:
    provider: FakeProvider = request.app.state.provider
    provider.request_log.record(request.headers.get("x-client-request-id"))
    provider.stats.record_request()
    response = await _respond(provider, request)
    provider.stats.record_status(response.status_code)
    return response


async def _respond(provider: FakeProvider, request: Request) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _json(401, error_body("Incorrect API key provided", "invalid_request_error",
                                     "invalid_api_key"))  # fmt: skip
    try:
        chat = parse_chat_request(await request.body())
    except ProtocolError as error:
        return _json(error.status, error.body())
    provider.stats.record_step(chat.step)
    wait = provider.bucket.acquire()
    if wait > 0:
        return _rate_limited(wait, "Rate limit reached for requests", "rate_limit_exceeded")
    fault = provider.faults.take(chat.step, chat.model)
    if fault is not None and fault.kind not in ("hang", "malformed", "invalid"):
        return _injected_error(fault)
    if fault is not None and fault.kind == "hang":
        hang_s = DEFAULT_HANG_S if fault.hang_s is None else fault.hang_s
        if await _client_left_within(request.receive, hang_s):
            return Response(status_code=CLIENT_CLOSED_REQUEST)
    elif latency := provider.latency_s():
        await asyncio.sleep(latency)
    if fault is not None and fault.kind in ("malformed", "invalid"):
        content = broken_content(fault.kind, chat.step)
    else:
        try:
            content = json.dumps(answer_step(chat.step, chat.user_content))
        except StepInputError as error:
            return _json(400, error_body(str(error), "invalid_request_error", error.code))
    return _json(200, completion_body(chat.model, content, chat.prompt_chars))


def _injected_error(fault: Fault) -> Response:
    if fault.kind == "429":
        retry_after = DEFAULT_RETRY_AFTER_S if fault.retry_after is None else fault.retry_after
        return _rate_limited(retry_after, "Rate limit reached (injected)", "injected_fault")
    if fault.kind == "400":
        body = error_body("Invalid request (injected)", "invalid_request_error", "injected_fault")
    elif fault.kind == "503":
        body = error_body("The server is overloaded (injected)", "server_error", "injected_fault")
    else:
        body = error_body("The server had an error (injected)", "server_error", "injected_fault")
    return _json(int(fault.kind), body)


def _rate_limited(wait_s: float, message: str, code: str) -> Response:
    response = _json(429, error_body(message, "rate_limit_error", code))
    response.headers["Retry-After"] = str(max(1, math.ceil(wait_s)))
    response.headers["retry-after-ms"] = str(math.ceil(wait_s * 1000))
    return response


async def _client_left_within(receive: Receive, seconds: float) -> bool:
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


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json")
