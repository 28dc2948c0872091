"""The adapters of the provider-batch lane's interface (docpipe.providers.batch_interfaces):
Anthropic's Message Batches spoken through an injected transport, requests and answers
translated to and from the chat-completions shape docpipe records and validates."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx

from docpipe.providers.anthropic_batches import (
    AnthropicBatches,
    chat_completion,
    message_params,
    read_results,
)
from docpipe.providers.batch_interfaces import BatchHTTP
from docpipe.state.provider_batches import PackedCall

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
BODY = {
    "model": "m",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    "temperature": 1.5,
    "max_tokens": 50,
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "answer", "strict": True, "schema": SCHEMA},
    },
}


def test_a_chat_request_becomes_the_message_request_it_amounts_to() -> None:
    assert message_params(BODY) == {
        "model": "m",
        "max_tokens": 50,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 1.0,  # Anthropic's range ends at 1
        "output_format": {"type": "json_schema", "schema": SCHEMA},
    }
    newer = {"model": "m", "messages": BODY["messages"][1:], "max_completion_tokens": 9}
    assert message_params(newer) == {"model": "m", "max_tokens": 9, "messages": newer["messages"]}


def test_a_message_reads_as_a_chat_completion() -> None:
    message = {
        "id": "msg_1",
        "model": "m",
        "content": [{"type": "text", "text": '{"a": '}, {"type": "text", "text": '"x"}'}],
        "stop_reason": "max_tokens",
        "usage": {"input_tokens": 12, "output_tokens": 3},
    }
    completion = chat_completion(message)
    assert completion["choices"][0]["message"]["content"] == '{"a": "x"}'
    assert completion["choices"][0]["finish_reason"] == "length"
    assert completion["usage"] == {"prompt_tokens": 12, "completion_tokens": 3}


def test_results_are_answers_and_errors_classified_as_in_real_time() -> None:
    def line(custom_id: str, result: dict[str, Any]) -> bytes:
        return json.dumps({"custom_id": custom_id, "result": result}).encode()

    def errored(kind: str) -> dict[str, Any]:
        return {"type": "errored", "error": {"type": "error", "error": {"type": kind}}}

    message = {"content": [{"type": "text", "text": "{}"}], "usage": {}, "stop_reason": "end_turn"}
    data = b"\n".join(
        [
            line("docpipe-call-1", {"type": "succeeded", "message": message}),
            line("docpipe-call-2", errored("invalid_request_error")),
            line("docpipe-call-3", errored("overloaded_error")),
            line("docpipe-call-4", errored("rate_limit_error")),
            line("docpipe-call-5", {"type": "expired"}),
            line("docpipe-call-6", {"type": "canceled"}),
            line("someone-else-7", {"type": "expired"}),
            b"not json",
        ]
    )
    lines = {r.call_id: r for r in read_results(data)}
    assert sorted(lines) == [1, 2, 3, 4, 5, 6]
    assert lines[1].answer is not None and lines[1].error_kind is None
    kinds = {i: lines[i].error_kind for i in range(2, 7)}
    assert kinds == {
        2: "bad_request",
        3: "server_error",
        4: "rate_limited",
        5: "batch_expired",
        6: "batch_cancelled",
    }


def batches(handler: Any) -> AnthropicBatches:
    http = BatchHTTP(
        "http://provider/v1",
        AnthropicBatches.headers("k"),
        timeout_s=5,
        transport=httpx.MockTransport(handler),
    )
    return AnthropicBatches(http)


def batch_object(batch_id: str, created_at: str, *, requests: int, **over: Any) -> dict[str, Any]:
    counts = {"processing": requests, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    return {
        "id": batch_id,
        "processing_status": "in_progress",
        "request_counts": counts,
        "created_at": created_at,
        "cancel_initiated_at": None,
        **over,
    }


def test_a_create_carries_the_requests_and_the_key_as_anthropic_wants() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, json=batch_object("msgbatch_1", "2026-12-04T10:00:00Z", requests=2)
        )

    interface = batches(handler)
    calls = [PackedCall(7, BODY), PackedCall(8, BODY)]
    created = interface.create(
        1, [interface.request_bytes(c) for c in calls], staged=None, window="24h"
    )
    assert (created.remote_id, created.status, created.requests) == ("msgbatch_1", "in_progress", 2)
    [request] = seen
    assert request.url.path == "/v1/messages/batches"
    assert request.headers["x-api-key"] == "k" and request.headers["anthropic-version"]
    sent = json.loads(request.content)
    assert [r["custom_id"] for r in sent["requests"]] == ["docpipe-call-7", "docpipe-call-8"]
    assert sent["requests"][0]["params"] == message_params(BODY)


def test_a_lost_batch_is_looked_for_among_those_created_since_its_intent_by_size() -> None:
    pages = {
        None: {
            "data": [
                batch_object("msgbatch_new", "2026-12-04T10:05:00Z", requests=3),
                batch_object("msgbatch_other", "2026-12-04T10:04:00Z", requests=2),
                batch_object("msgbatch_mine", "2026-12-04T10:03:00Z", requests=3),
            ],
            "has_more": True,
            "last_id": "msgbatch_mine",
        },
        "msgbatch_mine": {
            "data": [batch_object("msgbatch_old", "2026-12-04T09:00:00Z", requests=3)],
            "has_more": False,
            "last_id": "msgbatch_old",
        },
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=pages[request.url.params.get("after_id")])

    since = datetime(2026, 12, 4, 10, 3, 30, tzinfo=UTC).timestamp()
    found = batches(handler).find(1, requests=3, since=since)
    # Oldest first, the batch of another size and the one long before the intent left out
    # (one created up to two minutes before it still counts: the provider's clock may lag).
    assert [r.remote_id for r in found] == ["msgbatch_mine", "msgbatch_new"]


def test_an_ended_batch_is_cancelled_expired_or_completed_in_docpipe_s_words() -> None:
    def retrieve(batch: dict[str, Any]) -> str:
        interface = batches(lambda _: httpx.Response(200, json=batch))
        return interface.retrieve("b").status

    at = "2026-12-04T10:00:00Z"
    assert retrieve(batch_object("b", at, requests=1, processing_status="canceling")) == (
        "cancelling"
    )
    ended = batch_object("b", at, requests=1, processing_status="ended")
    assert retrieve(ended) == "completed"
    assert retrieve({**ended, "request_counts": {"expired": 1}}) == "expired"
    assert retrieve({**ended, "cancel_initiated_at": at}) == "cancelled"
