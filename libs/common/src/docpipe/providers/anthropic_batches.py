"""Anthropic's Message Batches (``batch.interface: anthropic``), as Anthropic's API reference
describes them: ``/v1/messages/batches`` (create with the requests inside, retrieve, list,
cancel) and each ended batch's results, one JSON line per request.

A call's chat-completions body becomes a Message request's ``params`` (system prompt apart,
``max_tokens``, a strict JSON schema as ``output_format``); a succeeded result's Message
becomes the chat completion it amounts to, so the woken step reads it as any answer. An
errored result is classified by its error type as the same error in real time would be; a
canceled or expired one is the batch's end, as OpenAI's error file says it.

Anthropic keeps no metadata and no file of a batch: after a lost answer to a create, the
batch is found again among the provider's batches created since docpipe's intent was
recorded, with as many requests as the intent packed (the collector takes the oldest that
no other provider batch of docpipe's has recorded).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from docpipe import json_codec
from docpipe.providers.batch_interfaces import BatchHTTP, RemoteBatch, call_id_of
from docpipe.providers.calls import call_request_id
from docpipe.state.provider_batches import BatchLine, PackedCall

__all__ = ["VERSION", "AnthropicBatches"]

# The version of Anthropic's API spoken (a header every request must carry).
VERSION = "2023-06-01"
_PATH = "/messages/batches"
_PAGE = 100
# How far the provider's clock may be behind the database's when a lost batch is looked
# for: a batch created that long before its intent was recorded still counts.
_CLOCK_SKEW_S = 120.0
# An errored request's error type, as docpipe classifies the same error in real time.
_ERROR_KINDS = {
    "invalid_request_error": "bad_request",
    "authentication_error": "auth",
    "permission_error": "auth",
    "not_found_error": "not_found",
    "request_too_large": "too_large",
    "rate_limit_error": "rate_limited",
    "api_error": "server_error",
    "overloaded_error": "server_error",
}
_ENDED_REQUESTS = {"canceled": "batch_cancelled", "expired": "batch_expired"}
_FINISH_REASONS = {"max_tokens": "length", "refusal": "content_filter"}


class AnthropicBatches:
    """One provider's message batches (docpipe.providers.batch_interfaces.BatchInterface)."""

    def __init__(self, http: BatchHTTP) -> None:
        self._http = http

    @staticmethod
    def headers(api_key: str) -> dict[str, str]:
        return {"anthropic-version": VERSION} | ({"x-api-key": api_key} if api_key else {})

    def close(self) -> None:
        self._http.close()

    def request_bytes(self, call: PackedCall) -> bytes:
        entry = {"custom_id": call_request_id(call.call_id), "params": message_params(call.body)}
        return json_codec.dumps(entry) + b","

    def stage(self, provider_batch_id: int, requests: Sequence[bytes]) -> str | None:
        return None  # the requests travel in the create request

    def find_staged(self, provider_batch_id: int) -> str | None:
        return None

    def create(
        self, provider_batch_id: int, requests: Sequence[bytes], *, staged: str | None, window: str
    ) -> RemoteBatch:
        # Anthropic's window is its own (24 hours); the declared one only says how long
        # docpipe expects to wait.
        body = b'{"requests":[' + b"".join(requests).removesuffix(b",") + b"]}"
        headers = {"content-type": "application/json"}
        return _remote(self._http.json("POST", _PATH, content=body, headers=headers))

    def find(self, provider_batch_id: int, *, requests: int, since: float) -> list[RemoteBatch]:
        """The batches created since ``since`` (less the clock's skew) with ``requests``
        requests, oldest first."""
        found = [
            remote for remote in self._batches(since - _CLOCK_SKEW_S) if remote.requests == requests
        ]
        return sorted(found, key=lambda r: r.created_at)

    def retrieve(self, remote_id: str) -> RemoteBatch:
        return _remote(self._http.json("GET", f"{_PATH}/{remote_id}"))

    def cancel(self, remote_id: str) -> RemoteBatch:
        return _remote(self._http.json("POST", f"{_PATH}/{remote_id}/cancel"))

    def results(self, remote: RemoteBatch) -> list[BatchLine]:
        data = self._http.send("GET", f"{_PATH}/{remote.remote_id}/results").content
        return list(read_results(data))

    def _batches(self, since: float) -> Iterator[RemoteBatch]:
        """The batches created at or after ``since``, newest first."""
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": _PAGE} | ({"after_id": after} if after else {})
            page = self._http.json("GET", _PATH, params=params)
            for batch in page.get("data") or []:
                remote = _remote(batch)
                if remote.created_at < since:
                    return
                yield remote
            if not page.get("has_more") or not page.get("last_id"):
                return
            after = str(page["last_id"])


def message_params(body: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-completions request body as the Message request it amounts to."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    system = "\n\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
    params: dict[str, Any] = {
        "model": body.get("model"),
        "max_tokens": body.get("max_tokens") or body.get("max_completion_tokens"),
        "messages": [dict(m) for m in messages if m.get("role") != "system"],
    }
    if system:
        params["system"] = system
    if "temperature" in body:
        # Anthropic's range is 0 to 1, OpenAI's 0 to 2.
        params["temperature"] = min(float(body["temperature"]), 1.0)
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping) and response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        params["output_format"] = {"type": "json_schema", "schema": schema}
    return params


def read_results(data: bytes) -> Iterator[BatchLine]:
    """A batch's results as answers (chat completions) and errors of docpipe's calls."""
    for raw in data.splitlines():
        try:
            entry = orjson.loads(raw)
            call_id = call_id_of(entry.get("custom_id"))
            result = entry.get("result") or {}
            kind = result.get("type")
        except (ValueError, AttributeError):
            continue
        if call_id is None:
            continue
        if kind == "succeeded" and isinstance(result.get("message"), Mapping):
            yield BatchLine(call_id, answer=chat_completion(result["message"]))
        elif kind == "errored":
            error = (result.get("error") or {}).get("error") or {}
            yield BatchLine(
                call_id,
                error_kind=_ERROR_KINDS.get(str(error.get("type")), "server_error"),
                error=str(error.get("message") or error)[:500],
            )
        elif kind in _ENDED_REQUESTS:
            yield BatchLine(
                call_id, error_kind=_ENDED_REQUESTS[kind], error=f"the request was {kind}"
            )


def chat_completion(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Message as the chat completion it amounts to (its text blocks as the content)."""
    text = "".join(
        str(block.get("text") or "")
        for block in message.get("content") or []
        if isinstance(block, Mapping) and block.get("type") == "text"
    )
    usage = message.get("usage") or {}
    stop = str(message.get("stop_reason"))
    return {
        "id": message.get("id"),
        "object": "chat.completion",
        "model": message.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": _FINISH_REASONS.get(stop, "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
        },
    }


def _remote(batch: Mapping[str, Any]) -> RemoteBatch:
    counts = batch.get("request_counts") or {}
    return RemoteBatch(
        remote_id=str(batch["id"]),
        status=_status(batch),
        created_at=_seconds(batch.get("created_at")),
        requests=sum(int(n) for n in counts.values() if isinstance(n, int)),
        error=(
            f"the provider batch ended with {counts.get('expired')} requests expired"
            if counts.get("expired")
            else None
        ),
    )


def _status(batch: Mapping[str, Any]) -> str:
    """``processing_status`` in docpipe's words: an ended batch is cancelled if a cancel
    was asked, expired if some of its requests expired, completed otherwise."""
    processing = batch.get("processing_status")
    if processing == "canceling":
        return "cancelling"
    if processing != "ended":
        return "in_progress"
    if batch.get("cancel_initiated_at"):
        return "cancelled"
    return "expired" if (batch.get("request_counts") or {}).get("expired") else "completed"


def _seconds(at: Any) -> float:
    try:
        return datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
