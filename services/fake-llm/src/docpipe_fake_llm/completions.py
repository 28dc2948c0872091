"""``POST /v1/chat/completions``: auth, validation, rate limit, faults, latency, then the answer.

Rate limiting comes before fault injection and latency, as at a real provider: a throttled
request costs nothing and consumes no fault.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Request, Response

from docpipe_fake_llm.answers import completion_for
from docpipe_fake_llm.faults import ANSWER_FAULTS, DEFAULT_HANG_S, DEFAULT_RETRY_AFTER_S, Fault
from docpipe_fake_llm.protocol import (
    DEFAULT_RESERVED_TOKENS,
    ChatRequest,
    ProtocolError,
    error_body,
    parse_chat_request,
    stream_chunks,
)
from docpipe_fake_llm.provider import FakeProvider
from docpipe_fake_llm.reader import StepInputError
from docpipe_fake_llm.replies import client_left_within, json_response, rate_limited

__all__ = ["router"]

router = APIRouter()

CLIENT_CLOSED_REQUEST = 499  # recorded when a client gives up on a hanging request


@router.post("/v1/chat/completions")
async def create_chat_completion(request: Request) -> Response:
    provider: FakeProvider = request.app.state.provider
    provider.request_log.record(request.headers.get("x-client-request-id"))
    provider.stats.record_request()
    try:
        response = await _respond(provider, request)
    finally:
        provider.stats.record_answered()
    provider.stats.record_status(response.status_code)
    return response


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    """The configured model names (any other name is answered all the same)."""
    provider: FakeProvider = request.app.state.provider
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    return json_response(
        200,
        {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "docpipe-fake-llm"}
                for name in provider.config.models
            ],
        },
    )


def _unauthorized() -> Response:
    return json_response(
        401, error_body("Incorrect API key provided", "invalid_request_error", "invalid_api_key")
    )


async def _respond(provider: FakeProvider, request: Request) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    try:
        chat = parse_chat_request(await request.body())
    except ProtocolError as error:
        return json_response(error.status, error.body())
    step = chat.step or "json_schema"
    provider.stats.record_step(step)
    provider.stats.record_response_format(chat.response_type)
    reserved = chat.prompt_tokens + (chat.max_tokens or DEFAULT_RESERVED_TOKENS)
    wait = provider.limits.admit(chat.model, reserved)
    if wait > 0:
        return rate_limited(
            wait,
            "Rate limit reached for requests",
            "rate_limit_exceeded",
            _rate_headers(provider, chat.model),
        )
    response, usage = await _answer(provider, chat, request)
    used = 0
    if usage is not None:
        used = usage["total_tokens"]
        provider.stats.record_tokens(chat.model, used)
        provider.billing.bill(
            chat.model, usage["prompt_tokens"], usage["completion_tokens"], batch=False
        )
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
        if await client_left_within(request.receive, hang_s):
            return Response(status_code=CLIENT_CLOSED_REQUEST), None
    elif latency := provider.latency_s():
        await asyncio.sleep(latency)
    try:
        body = completion_for(chat, provider.mistakes, fault.kind if fault is not None else None)
    except StepInputError as error:
        return json_response(400, error_body(str(error), "invalid_request_error", error.code)), None
    response = _stream(body, chat.include_usage) if chat.stream else json_response(200, body)
    return response, body["usage"]


def _rate_headers(provider: FakeProvider, model: str) -> dict[str, str]:
    return provider.limits.headers(model) if provider.config.rate_headers else {}


def _stream(body: dict[str, Any], include_usage: bool) -> Response:
    events = [f"data: {json.dumps(c)}\n\n" for c in stream_chunks(body, include_usage)]
    return Response("".join([*events, "data: [DONE]\n\n"]), media_type="text/event-stream")


def _injected_error(fault: Fault) -> Response:
    if fault.kind == "429":
        retry_after = DEFAULT_RETRY_AFTER_S if fault.retry_after is None else fault.retry_after
        return rate_limited(retry_after, "Rate limit reached (injected)", "injected_fault")
    if fault.kind == "400":
        body = error_body("Invalid request (injected)", "invalid_request_error", "injected_fault")
    elif fault.kind == "503":
        body = error_body("The server is overloaded (injected)", "server_error", "injected_fault")
    else:
        body = error_body("The server had an error (injected)", "server_error", "injected_fault")
    return json_response(int(fault.kind), body)
