"""The client's error mapping, through httpx's MockTransport (no server needed)."""

import json
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from docpipe.errors import InvalidOutputError, PermanentLLMError, TransientLLMError
from docpipe.providers.client import ChatRequest, LLMClient, parse_output
from docpipe.settings.provider_specs import OutputMode

USER = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
REQUEST = ChatRequest(model="m", messages=USER)


def client(handler: Callable[[httpx.Request], httpx.Response]) -> LLMClient:
    return LLMClient(
        base_url="http://provider/v1",
        api_key="k",
        timeout_s=1,
        transport=httpx.MockTransport(handler),
    )


def completion(
    content: str, prompt_tokens: int = 10, completion_tokens: int = 5, **changes: Any
) -> httpx.Response:
    body = {
        "model": "m",
        "choices": [{"message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }
    return httpx.Response(200, json=body | changes, headers=changes.pop("headers", None))


def test_a_completion_carries_content_and_usage() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return completion('{"a": 1}', 123, 45)

    result = client(handler).chat(REQUEST)
    assert (result.content, result.input_tokens, result.output_tokens) == ('{"a": 1}', 123, 45)
    assert not result.usage_estimated
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

    client(handler).chat(ChatRequest(model="m", messages=USER, request_id="docpipe-call-42"))
    assert seen[0].headers["x-client-request-id"] == "docpipe-call-42"


SCHEMA = {"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}}}
STRICT = {**SCHEMA, "additionalProperties": False}


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            ChatRequest(
                model="m",
                messages=USER,
                output_mode=OutputMode.JSON_SCHEMA,
                schema=STRICT,
                schema_name="summarize",
                max_tokens=300,
                seed=7,
            ),
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "summarize", "strict": True, "schema": STRICT},
                },
                "max_tokens": 300,
                "seed": 7,
                "temperature": 0.0,
            },
        ),
        (
            ChatRequest(
                model="m",
                messages=USER,
                output_mode=OutputMode.NONE,
                max_tokens=50,
                max_tokens_field="max_completion_tokens",
                temperature=0.2,
            ),
            {"max_completion_tokens": 50, "temperature": 0.2},
        ),
    ],
)
def test_the_output_mode_and_generation_parameters_are_sent(
    request_: ChatRequest, expected: dict[str, Any]
) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return completion('{"x": 1}')

    client(handler).chat(request_)
    assert seen[0] == {"model": "m", "messages": USER, **expected}


def test_a_completion_without_usage_is_used_and_its_tokens_estimated() -> None:
    """Missing usage is no error: the answer was paid for, so its cost is estimated from
    the characters (3 per token) rather than recorded as zero."""
    response = httpx.Response(200, json={"choices": [{"message": {"content": '{"x": 1}'}}]})
    result = client(lambda _: response).chat(REQUEST)
    assert result.content == '{"x": 1}'
    assert result.usage_estimated
    assert result.output_tokens == 3  # ceil(8 / 3)
    assert result.input_tokens == 1 + 4 + 2 + 4  # per message: ceil(len / 3) + 4


def test_rate_limit_headers_are_read_from_answers_and_errors() -> None:
    headers = {
        "x-ratelimit-remaining-requests": "4",
        "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "1m30.5s",
        "x-ratelimit-limit-tokens": "6000",
        "x-ratelimit-reset-requests": "120ms",
    }
    ok = client(lambda _: completion('{"x": 1}', headers=headers)).chat(REQUEST)
    assert ok.rate_limits == {
        "remaining_requests": 4,
        "remaining_tokens": 900,
        "limit_tokens": 6000,
        "reset_tokens_s": 90.5,
        "reset_requests_s": 0.12,
    }
    with pytest.raises(TransientLLMError) as caught:
        client(lambda _: httpx.Response(429, headers=headers)).chat(REQUEST)
    assert caught.value.rate_limits["remaining_tokens"] == 900


def test_finish_reasons_are_passed_on_and_a_content_filter_is_permanent() -> None:
    cut = {"choices": [{"message": {"content": '{"x": '}, "finish_reason": "length"}]}
    assert client(lambda _: httpx.Response(200, json=cut)).chat(REQUEST).finish_reason == "length"
    filtered = {"choices": [{"message": {"content": ""}, "finish_reason": "content_filter"}]}
    with pytest.raises(PermanentLLMError) as caught:
        client(lambda _: httpx.Response(200, json=filtered)).chat(REQUEST)
    assert caught.value.kind == "content_filter"


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
        # A 200 with no choice at all: the provider's hiccup, worth sending again.
        (httpx.Response(200, json={"choices": [], "usage": {}}), "bad_response", None),
        (httpx.Response(200, json={"choices": [{}]}), "bad_response", None),
        # A gateway's HTML page instead of OpenAI's error body: the status decides.
        (httpx.Response(502, text="<html>Bad Gateway</html>"), "server_error", None),
        # Retry-After as an HTTP date in the past: retry now.
        (
            httpx.Response(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
            "rate_limited",
            0.0,
        ),
    ],
)
def test_transient_failures(response: httpx.Response, kind: str, retry_after: float | None) -> None:
    with pytest.raises(TransientLLMError) as caught:
        client(lambda _: response).chat(REQUEST)
    assert caught.value.kind == kind
    assert caught.value.retry_after == retry_after


def test_retry_after_as_a_future_http_date_is_the_time_until_then() -> None:
    later = formatdate(time.time() + 30, usegmt=True)
    response = httpx.Response(429, headers={"Retry-After": later})
    with pytest.raises(TransientLLMError) as caught:
        client(lambda _: response).chat(REQUEST)
    assert caught.value.retry_after is not None and 25 <= caught.value.retry_after <= 30


def test_a_non_json_error_body_is_reported_as_text_and_a_4xx_stays_permanent() -> None:
    response = httpx.Response(400, text="model 'x' not loaded")
    with pytest.raises(PermanentLLMError, match="model 'x' not loaded") as caught:
        client(lambda _: response).chat(REQUEST)
    assert caught.value.kind == "bad_request"


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "bad_request"), (401, "auth"), (404, "not_found"), (422, "bad_request")],
)
def test_other_client_errors_are_permanent(status: int, kind: str) -> None:
    response = httpx.Response(status, json={"error": {"message": "nope"}})
    with pytest.raises(PermanentLLMError, match="nope") as caught:
        client(lambda _: response).chat(REQUEST)
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
        client(handler).chat(REQUEST)
    assert caught.value.kind == kind


def test_empty_input_is_refused_before_sending() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("must not be sent")

    with pytest.raises(PermanentLLMError) as caught:
        client(handler).chat(ChatRequest(model="m", messages=[{"role": "user", "content": " "}]))
    assert caught.value.kind == "empty_input"


@pytest.mark.parametrize(
    "content",
    [
        '{"x": 1}',
        '```json\n{"x": 1}\n```',
        'Here you go: {"x": 1} Hope it helps!',
    ],
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


def test_parse_output_accepts_raw_newlines_inside_strings() -> None:
    """llama.cpp's JSON grammar lets a model write them; json.loads would refuse."""
    schema = {"type": "object", "properties": {"note": {"type": "string"}}}
    assert parse_output('{"note": "two\nlines"}', schema) == {"note": "two\nlines"}


def test_parse_output_of_a_strict_answer_drops_the_nulls_of_absent_optionals() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert parse_output('{"x": null}', schema, strict=True) == {}
    with pytest.raises(InvalidOutputError):
        parse_output('{"x": null}', schema)


def test_many_connections_are_kept_in_small_pools_each_thread_keeping_to_one() -> None:
    """httpcore scans a pool's every connection per request: a client of 100 connections
    keeps four pools of 25, and each thread sends all its requests through one of them."""
    import threading

    many = LLMClient(
        base_url="http://provider/v1",
        api_key="k",
        timeout_s=1,
        connections=100,
        transport=httpx.MockTransport(lambda _: completion('{"a": 1}')),
    )
    assert len(many._pools) == 4
    used: list[set[int]] = []  # per thread: the pools its requests went through

    def send_three() -> None:
        mine: set[int] = set()
        for _ in range(3):
            mine.add(id(many._http))
            many.chat(REQUEST)
        used.append(mine)

    threads = [threading.Thread(target=send_three) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [len(pools) for pools in used] == [1] * 8
    assert len(set().union(*used)) == 4, "the threads took the pools in turn"


def test_an_answer_is_read_in_small_chunks_and_arrives_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request waiting on its provider holds a buffer of one socket read: reads are of at
    most 16 KiB (not httpcore's 64 KiB), and an answer longer than that comes in several."""
    import http.server
    import threading

    import httpcore._backends.sync as sync_backend

    content = json.dumps({"text": "x" * 100_000})

    class Provider(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = completion(content).content
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    reads: list[int] = []
    read = sync_backend.SyncStream.read

    def counted(stream: Any, max_bytes: int, timeout: float | None = None) -> bytes:
        reads.append(max_bytes)
        return read(stream, max_bytes, timeout)

    monkeypatch.setattr(sync_backend.SyncStream, "read", counted)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        real = LLMClient(
            base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", api_key="k", timeout_s=5
        )
        answer = real.chat(REQUEST)
        real.close()
    finally:
        server.shutdown()
        server.server_close()
    assert answer.content == content
    assert reads and max(reads) == 16 * 1024
    assert len(reads) > 100_000 // (16 * 1024)
