"""The faults of the batch interfaces' points (batch_faults.PointFaults) applied to a route:
the action runs, or not, and the answer the client gets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request, Response

from docpipe_fake_llm.batch_faults import BatchPoint, PointFault
from docpipe_fake_llm.faults import DEFAULT_HANG_S, DEFAULT_RETRY_AFTER_S
from docpipe_fake_llm.protocol import error_body
from docpipe_fake_llm.provider import FakeProvider
from docpipe_fake_llm.replies import client_left_within, json_response, rate_limited

__all__ = ["anthropic_error", "at_point"]

CLIENT_CLOSED_REQUEST = 499


def anthropic_error(status: int, kind: str, message: str) -> Response:
    """An error as Anthropic's API answers it."""
    return json_response(status, {"type": "error", "error": {"type": kind, "message": message}})


async def at_point(
    provider: FakeProvider,
    request: Request,
    point: BatchPoint,
    act: Callable[[], Response],
    *,
    api: str = "openai",
) -> Response:
    """``act()``'s answer, unless a fault waits at ``point``: then the client gets the
    fault's answer, and the action ran only if the fault comes ``after`` it."""
    fault = provider.batch_faults.take(point)
    if fault is None:
        return act()
    if fault.after:
        act()  # done at the provider; its answer never reaches the client
    return await _fault_reply(fault, request, api)


async def _fault_reply(fault: PointFault, request: Request, api: str) -> Response:
    if fault.kind == "429":
        if api == "anthropic":
            response = anthropic_error(429, "rate_limit_error", "Rate limited (injected)")
            response.headers["retry-after"] = str(int(DEFAULT_RETRY_AFTER_S))
            return response
        return rate_limited(
            DEFAULT_RETRY_AFTER_S, "Rate limit reached (injected)", "injected_fault"
        )
    if fault.kind == "hang":
        hang_s = DEFAULT_HANG_S if fault.hang_s is None else fault.hang_s
        if await client_left_within(request.receive, hang_s):
            return Response(status_code=CLIENT_CLOSED_REQUEST)
    if api == "anthropic":
        return anthropic_error(500, "api_error", "Internal server error (injected)")
    body: dict[str, Any] = error_body(
        "The server had an error (injected)", "server_error", "injected_fault"
    )
    return json_response(500, body)
