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

from docpipe_fake_llm.faults import (
    ANSWER_FAULTS,
    DEFAULT_HANG_S,
    DEFAULT_RETRY_AFTER_S,
    Fault,
    broken_content,
    invent_quotes,
)
from docpipe_fake_llm.protocol import (
    DEFAULT_RESERVED_TOKENS,
    ChatRequest,
    ProtocolError,
    completion_body,
    error_body,
    parse_chat_request,
    stream_chunks,
)
from docpipe_fake_llm.provider import FakeProvider
from docpipe_fake_llm.reader import StepInputError, answer_step
from docpipe_fake_llm.schema_answers import answer_schema, fit_to_schema

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


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    """The configured model names (any other name is answered all the same)."""
    provider: FakeProvider = request.app.state.provider
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    return _json(200, {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "docpipe-fake-llm"}
            for name in provider.config.models
        ],
    })  # fmt: skip


def _unauthorized() -> Response:
    return _json(401, error_body("Incorrect API key provided", "invalid_request_error",
                                 "invalid_api_key"))  # fmt: skip


async def _respond(provider: FakeProvider, request: Request) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    try:
        chat = parse_chat_request(await request.body())
    except ProtocolError as error:
        return _json(error.status, error.body())
    step = chat.step or "json_schema"
    provider.stats.record_step(step)
    provider.stats.record_response_format(chat.response_type)
    reserved = chat.prompt_tokens + (chat.max_tokens or DEFAULT_RESERVED_TOKENS)
    wait = provider.limits.admit(chat.model, reserved)
    if wait > 0:
        return _rate_limited(wait, "Rate limit reached for requests", "rate_limit_exceeded",
                             _rate_headers(provider, chat.model))  # fmt: skip
    response, usage = await _answer(provider, chat, request)
    used = 0
    if usage is not None:
        used = usage["total_tokens"]
        provider.stats.record_tokens(chat.model, used)
    # Charged with what it used: an error or a shorter answer gives the rest back.
    provider.limits.settle(chat.model, reserved - used)
    response.headers.update(_rate_headers(provider, chat.model))
    return response


async def _answer(
    provider: FakeProvider, chat: ChatRequest, request: Request
) -> tuple[Response, dict[str, int] | None]:
    """The answer, and its usage when it is a completion."""
    fault = provider.faults.take(chat.step or "", chat.model)
    if fault is not None and fault.kind not in ANSWER_FAULTS:
        return _injected_error(fault), None
    if fault is not None and fault.kind == "hang":
        hang_s = DEFAULT_HANG_S if fault.hang_s is None else fault.hang_s
        if await _client_left_within(request.receive, hang_s):
            return Response(status_code=CLIENT_CLOSED_REQUEST), None
    elif latency := provider.latency_s():
        await asyncio.sleep(latency)
    if fault is not None and fault.kind in ("malformed", "invalid"):
        content = broken_content(fault.kind, chat.step or "")
    else:
        try:
            value = _answer_value(chat)
            if fault is not None and fault.kind == "invented_quote":
                value = invent_quotes(value)
            content = json.dumps(value) if value is not None else _echo(chat.user_content)
        except StepInputError as error:
            return _json(400, error_body(str(error), "invalid_request_error", error.code)), None
    # An answer longer than max_tokens is cut there, as a model's is.
    limit = 1 if fault is not None and fault.kind == "length" else chat.max_tokens
    finish_reason = "stop"
    if limit is not None and math.ceil(len(content) / 4) > limit:
        content, finish_reason = content[: limit * 4], "length"
    body = completion_body(chat.model, content, chat.prompt_chars, finish_reason)
    response = _stream(body, chat.include_usage) if chat.stream else _json(200, body)
    return response, body["usage"]


def _answer_value(chat: ChatRequest) -> Any:
    """docpipe's own steps get the answers a real model gives them (fitted to a strict
    schema: what the text does not state is null); any other request gets one derived from
    its schema and the text."""
    if chat.step is not None:
        value = answer_step(chat.step, chat.user_content)
        return fit_to_schema(value, chat.schema, chat.user_content) if chat.schema else value
    if chat.schema is None:  # plain text: a sentence of what it was sent
        return None
    return answer_schema(chat.schema, chat.user_content)


def _echo(text: str) -> str:
    return "You wrote: " + " ".join(text.split()[:30])


def _rate_headers(provider: FakeProvider, model: str) -> dict[str, str]:
    return provider.limits.headers(model) if provider.config.rate_headers else {}


def _stream(body: dict[str, Any], include_usage: bool) -> Response:
    events = [f"data: {json.dumps(c)}\n\n" for c in stream_chunks(body, include_usage)]
    return Response("".join([*events, "data: [DONE]\n\n"]), media_type="text/event-stream")


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


def _rate_limited(
    wait_s: float, message: str, code: str, headers: dict[str, str] | None = None
) -> Response:
    response = _json(429, error_body(message, "rate_limit_error", code))
    response.headers.update(headers or {})
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
