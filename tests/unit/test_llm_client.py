"""The client's error mapping, through httpx's MockTransport (no server needed)."""

import json
from collections.abc import Callable

import httpx
import pytest

from docpipe.errors import InvalidOutputError, PermanentLLMError, TransientLLMError
from docpipe.providers.client import LLMClient, parse_output

USER = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]


def client(handler: Callable[[httpx.Request], httpx.Response]) -> LLMClient:
    return LLMClient(
        base_url="http://provider/v1",
        api_key="k",
        timeout_s=1,
        transport=httpx.MockTransport(handler),
    )


def completion(content: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "model": "m",
            "choices": [{"message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        },
    )


def test_a_completion_carries_content_and_usage() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return completion('{"a": 1}', 123, 45)

    result = client(handler).chat(model="m", messages=USER)
    assert (result.content, result.input_tokens, result.output_tokens) == ('{"a": 1}', 123, 45)
    body = json.loads(seen[0].content)
    assert seen[0].url.path == "/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer k"
    assert body["response_format"] == {"type": "json_object"}
    assert body["model"] == "m"
    assert "x-client-request-id" not in seen[0].headers


def test_a_request_id_goes_out_as_the_client_request_id_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return completion('{"a": 1}')

    client(handler).chat(model="m", messages=USER, request_id="docpipe-call-42")
    assert seen[0].headers["x-client-request-id"] == "docpipe-call-42"


@pytest.mark.parametrize(
    ("response", "kind", "retry_after"),
    [
        (httpx.Response(429, headers={"Retry-After": "7"}), "rate_limited", 7.0),
        (httpx.Response(429, headers={"retry-after-ms": "1500"}), "rate_limited", 1.5),
        (httpx.Response(429), "rate_limited", None),
        (httpx.Response(500, json={"error": {"message": "boom"}}), "server_error", None),
        (httpx.Response(503, headers={"Retry-After": "2"}), "server_error", 2.0),
        (httpx.Response(529), "server_error", None),
        (httpx.Response(200, text="<html>"), "bad_response", None),
    ],
)
def test_transient_failures(response: httpx.Response, kind: str, retry_after: float | None) -> None:
    with pytest.raises(TransientLLMError) as caught:
        client(lambda _: response).chat(model="m", messages=USER)
    assert caught.value.kind == kind
    assert caught.value.retry_after == retry_after


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "bad_request"), (401, "auth"), (404, "not_found"), (422, "bad_request")],
)
def test_other_client_errors_are_permanent(status: int, kind: str) -> None:
    response = httpx.Response(status, json={"error": {"message": "nope"}})
    with pytest.raises(PermanentLLMError, match="nope") as caught:
        client(lambda _: response).chat(model="m", messages=USER)
    assert caught.value.kind == kind
    assert caught.value.http_status == status


@pytest.mark.parametrize(
    ("error", "kind"),
    [(httpx.ReadTimeout("slow"), "timeout"), (httpx.ConnectError("refused"), "connection")],
)
def test_network_failures_are_transient(error: Exception, kind: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    with pytest.raises(TransientLLMError) as caught:
        client(handler).chat(model="m", messages=USER)
    assert caught.value.kind == kind


def test_empty_input_is_refused_before_sending() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("must not be sent")

    with pytest.raises(PermanentLLMError) as caught:
        client(handler).chat(model="m", messages=[{"role": "user", "content": "  \n"}])
    assert caught.value.kind == "empty_input"


SCHEMA = {"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}}}


@pytest.mark.parametrize(
    "content",
    ['{"x": 1}', '```json\n{"x": 1}\n```', 'Here you go: {"x": 1} Hope it helps!'],
)
def test_parse_output_repairs_what_models_wrap_around_json(content: str) -> None:
    assert parse_output(content, SCHEMA) == {"x": 1}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "no JSON object"),
        ('{"x": ', "no JSON object"),
        ('{"x": 1,,}', "not valid JSON"),
        ('{"x": "one"}', "breaks its schema"),
        ('{"y": 1}', "breaks its schema"),
    ],
)
def test_parse_output_rejects_what_it_cannot_repair(content: str, reason: str) -> None:
    with pytest.raises(InvalidOutputError, match=reason):
        parse_output(content, SCHEMA)
