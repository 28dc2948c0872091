"""Anthropic's Message Batches: ``/v1/messages/batches`` (create, retrieve, list, cancel) and
its results (JSON lines, once the batch has ended), as Anthropic's API reference describes
them.

Validation is Anthropic's, at creation: 1 to ``batch_max_requests`` requests whose custom_ids
are unique and match ``^[a-zA-Z0-9_-]{1,64}$``, each with ``params`` naming a model, a
positive ``max_tokens`` and its messages; a body over ``batch_max_bytes`` is 413. Each
request is answered as the chat completion it would be (``system`` first, an
``output_format`` json_schema as a strict response_format), shown as a Message.

The batch's life (batch_store) shows as ``processing_status``: validating, in_progress and
finalizing are ``in_progress``, cancelling is ``canceling``, the rest ``ended``.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from docpipe_fake_llm.batch_points import anthropic_error, at_point
from docpipe_fake_llm.batch_store import ENDED, BatchLine, FakeBatch
from docpipe_fake_llm.provider import FakeProvider
from docpipe_fake_llm.replies import json_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/messages/batches")

WINDOW_S = 24 * 3600.0
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_STATUS = {"cancelling": "canceling", **dict.fromkeys(ENDED, "ended")}
_ERROR_TYPES = {400: "invalid_request_error", 429: "rate_limit_error", 529: "overloaded_error"}


def _provider(request: Request) -> FakeProvider:
    provider: FakeProvider = request.app.state.provider
    return provider


ProviderDep = Annotated[FakeProvider, Depends(_provider)]


def _authorized(provider: FakeProvider, request: Request) -> bool:
    key = request.headers.get("x-api-key")
    return provider.is_authorized(f"Bearer {key}" if key else request.headers.get("authorization"))


def _unauthorized() -> Response:
    return anthropic_error(401, "authentication_error", "invalid x-api-key")


@router.post("")
async def create_message_batch(request: Request, provider: ProviderDep) -> Response:
    if not _authorized(provider, request):
        return _unauthorized()
    raw = await request.body()
    if len(raw) > provider.config.batch_max_bytes:
        return anthropic_error(413, "request_too_large", "Request exceeds the maximum size")
    try:
        asked = json.loads(raw)
    except ValueError:
        return anthropic_error(400, "invalid_request_error", "The body is not valid JSON")
    requests = asked.get("requests") if isinstance(asked, dict) else None
    if not isinstance(requests, list) or not requests:
        return anthropic_error(400, "invalid_request_error", "requests: a non-empty list")
    if len(requests) > provider.config.batch_max_requests:
        most = provider.config.batch_max_requests
        return anthropic_error(400, "invalid_request_error", f"requests: at most {most}")
    lines: list[BatchLine] = []
    seen: set[str] = set()
    for i, entry in enumerate(requests):
        problem = _request_problem(entry, seen)
        if problem is not None:
            return anthropic_error(400, "invalid_request_error", f"requests.{i}: {problem}")
        seen.add(entry["custom_id"])
        lines.append(BatchLine(entry["custom_id"], _chat_body(entry["params"])))

    def create() -> Response:
        batch = provider.batches.create("anthropic", lines, window_s=WINDOW_S)
        return json_response(200, _batch_object(batch, request))

    return await at_point(provider, request, "create", create, api="anthropic")


@router.get("")
async def list_message_batches(
    request: Request,
    provider: ProviderDep,
    after_id: str | None = None,
    before_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> Response:
    if not _authorized(provider, request):
        return _unauthorized()
    batches = provider.batches.listed("anthropic")
    ids = [b.id for b in batches]
    start, end = 0, len(batches)
    if after_id is not None:
        start = ids.index(after_id) + 1 if after_id in ids else len(batches)
    if before_id is not None:
        end = ids.index(before_id) if before_id in ids else 0
        start = max(start, end - limit)
    page = batches[start : min(end, start + limit)]

    def listing() -> Response:
        data = [_batch_object(b, request) for b in page]
        return json_response(
            200,
            {
                "data": data,
                "has_more": start + len(page) < end,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            },
        )

    return await at_point(provider, request, "list", listing, api="anthropic")


@router.get("/{batch_id}")
async def retrieve_message_batch(
    batch_id: str, request: Request, provider: ProviderDep
) -> Response:
    if not _authorized(provider, request):
        return _unauthorized()
    batch = provider.batches.batches.get(batch_id)
    if batch is None or batch.api != "anthropic":
        return anthropic_error(404, "not_found_error", f"batch {batch_id} not found")
    return await at_point(
        provider,
        request,
        "retrieve",
        lambda: json_response(200, _batch_object(batch, request)),
        api="anthropic",
    )


@router.post("/{batch_id}/cancel")
async def cancel_message_batch(batch_id: str, request: Request, provider: ProviderDep) -> Response:
    if not _authorized(provider, request):
        return _unauthorized()
    batch = provider.batches.batches.get(batch_id)
    if batch is None or batch.api != "anthropic":
        return anthropic_error(404, "not_found_error", f"batch {batch_id} not found")

    def cancel() -> Response:
        provider.batches.cancel(batch)
        return json_response(200, _batch_object(batch, request))

    return await at_point(provider, request, "cancel", cancel, api="anthropic")


@router.get("/{batch_id}/results")
async def message_batch_results(batch_id: str, request: Request, provider: ProviderDep) -> Response:
    if not _authorized(provider, request):
        return _unauthorized()
    batch = provider.batches.batches.get(batch_id)
    if batch is None or batch.api != "anthropic":
        return anthropic_error(404, "not_found_error", f"batch {batch_id} not found")
    if batch.status not in ENDED:
        return anthropic_error(400, "invalid_request_error", "the batch has not ended yet")

    def download() -> Response:
        body = "".join(json.dumps(_result(line)) + "\n" for line in batch.lines)
        return Response(body.encode(), media_type="application/binary")

    return await at_point(provider, request, "download", download, api="anthropic")


def _request_problem(entry: Any, seen: set[str]) -> str | None:
    if not isinstance(entry, dict):
        return "each request is an object with custom_id and params"
    custom_id = entry.get("custom_id")
    if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
        return "custom_id must match ^[a-zA-Z0-9_-]{1,64}$"
    if custom_id in seen:
        return f"custom_id {custom_id!r} is used twice"
    params = entry.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("model"), str):
        return "params.model: a string"
    max_tokens = params.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "params.max_tokens: a positive integer"
    if not isinstance(params.get("messages"), list) or not params["messages"]:
        return "params.messages: a non-empty list"
    return None


def _chat_body(params: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's message params as the chat completion request they amount to."""
    system = params.get("system")
    if isinstance(system, list):
        system = "".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    messages = [{"role": "system", "content": system}] if system else []
    messages += [m for m in params["messages"] if isinstance(m, dict)]
    body: dict[str, Any] = {
        "model": params["model"],
        "messages": messages,
        "max_tokens": params["max_tokens"],
    }
    if "temperature" in params:
        body["temperature"] = params["temperature"]
    output_format = params.get("output_format")
    if isinstance(output_format, dict) and output_format.get("type") == "json_schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": "answer",
                "strict": True,
                "schema": output_format.get("schema"),
            },
        }
    return body


def _batch_object(batch: FakeBatch, request: Request) -> dict[str, Any]:
    """A message batch as Anthropic's API shows it."""
    counts = batch.counts()
    ended = batch.status in ENDED
    results_url = str(request.url_for("message_batch_results", batch_id=batch.id))
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": _STATUS.get(batch.status, "in_progress"),
        "request_counts": {
            "processing": counts["processing"],
            "succeeded": counts["succeeded"],
            "errored": counts["errored"],
            "canceled": counts["cancelled"],
            "expired": counts["expired"],
        },
        "ended_at": _time(batch.times.get(batch.status)) if ended else None,
        "created_at": _time(batch.created_at),
        "expires_at": _time(batch.expires_at),
        "archived_at": None,
        "cancel_initiated_at": _time(batch.cancel_requested_at),
        "results_url": results_url if ended else None,
    }


def _result(line: BatchLine) -> dict[str, Any]:
    """A request's line in the batch's results."""
    if line.outcome == "succeeded" and line.response is not None:
        return {
            "custom_id": line.custom_id,
            "result": {"type": "succeeded", "message": _message(line.response)},
        }
    if line.outcome == "errored":
        status = line.status_code or 500
        message = ((line.response or {}).get("error") or {}).get("message", "error")
        error = {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}
        return {
            "custom_id": line.custom_id,
            "result": {"type": "errored", "error": {"type": "error", "error": error}},
        }
    kind = "canceled" if line.outcome == "cancelled" else "expired"
    return {"custom_id": line.custom_id, "result": {"type": kind}}


def _message(completion: dict[str, Any]) -> dict[str, Any]:
    choice = completion["choices"][0]
    usage = completion["usage"]
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": completion["model"],
        "content": [{"type": "text", "text": choice["message"]["content"]}],
        "stop_reason": "max_tokens" if choice["finish_reason"] == "length" else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
        },
    }


def _time(at: float | None) -> str | None:
    return (
        None if at is None else datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    )
