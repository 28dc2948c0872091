"""The OpenAI-compatible chat-completions client (:class:`LLMClient`, one per provider;
:class:`ProviderClients`, every configured provider's behind one ``chat``), and the token
estimates made before a request is sent. Every failure leaves the client as a docpipe error.

The mapping is the whole retry policy of docpipe: what is transient here is retried with
backoff, what is permanent fails the run at once.

=========================================  ==========================================
what happened                              raised
=========================================  ==========================================
timeout, connection refused/reset          TransientLLMError(kind="timeout"/"connection")
429                                        TransientLLMError(kind="rate_limited", retry_after)
500-599, 408, 409 (and 529 "overloaded")   TransientLLMError(kind="server_error")
other 4xx (JSON or not)                    PermanentLLMError(kind="bad_request"/"auth"/...)
2xx that is not JSON, empty ``choices``    TransientLLMError(kind="bad_response")
``finish_reason: content_filter``          PermanentLLMError(kind="content_filter")
=========================================  ==========================================

Not errors here: a 2xx without ``usage`` (the answer is used and its tokens are estimated,
see the token estimates below), and ``finish_reason: length`` (the answer is returned
with it; the caller classifies the cut-off, see :mod:`docpipe.providers.calls`).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import httpcore
import httpx
import jsonschema
import orjson

from docpipe import json_codec
from docpipe.errors import InvalidOutputError, PermanentLLMError, TransientLLMError
from docpipe.pipelines.structured_output import drop_absent_optionals
from docpipe.providers.rate_headers import rate_limits, retry_after
from docpipe.settings.provider_specs import OutputMode, ProviderTable

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "ChatClient",
    "ChatRequest",
    "Completion",
    "LLMClient",
    "ProviderClients",
    "check_response",
    "estimate_prompt_tokens",
    "estimate_text_tokens",
    "parse_output",
    "read_completion",
    "validate_json",
]

Message = Mapping[str, str]
_REQUEST_ID_HEADER = "X-Client-Request-Id"


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion as sent: the model's name at the provider, the messages, how the
    answer is shaped and the generation parameters."""

    model: str
    messages: Sequence[Message]
    output_mode: OutputMode = OutputMode.JSON_OBJECT
    # The strict form of the answer's schema (json_schema mode), and its name.
    schema: Mapping[str, Any] | None = None
    schema_name: str = "answer"
    max_tokens: int | None = None
    temperature: float = 0.0
    seed: int | None = None
    max_tokens_field: str = "max_tokens"
    json_schema_style: str = "openai"  # see ProviderSpec.json_schema_style
    # Which of docpipe's providers it goes to (ProviderClients); not sent.
    provider: str = ""
    # Sent as a header, not in the body: the call log row's id (calls.call_request_id).
    request_id: str | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(self.messages),
            "temperature": self.temperature,
        }
        if self.max_tokens is not None:
            body[self.max_tokens_field] = self.max_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        if self.output_mode == OutputMode.JSON_SCHEMA and self.json_schema_style != "openai":
            assert self.schema is not None, "json_schema mode sends a schema"
            body["response_format"] = {
                "type": "json_object",
                "schema": _plain_patterns(self.schema),
            }
        elif self.output_mode == OutputMode.JSON_SCHEMA:
            assert self.schema is not None, "json_schema mode sends a schema"
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": self.schema_name, "strict": True, "schema": self.schema},
            }
        elif self.output_mode == OutputMode.JSON_OBJECT:
            body["response_format"] = {"type": "json_object"}
        return body


@dataclass(frozen=True)
class Completion:
    content: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    http_status: int
    finish_reason: str | None = None
    # True when the provider sent no usage and the tokens above are docpipe's estimate.
    usage_estimated: bool = False
    # What the provider's rate-limit headers said (see docpipe.providers.rate_headers).
    rate_limits: Mapping[str, float] = field(default_factory=dict)


# llama-cpp-python turns a pattern's \d, \w, \s into a grammar it cannot parse (and then
# crashes): the same classes spelled out (a space for \s, narrower, is still valid).
_CLASS_ESCAPES = {"\\d": "[0-9]", "\\w": "[A-Za-z0-9_]", "\\s": "[ ]"}


def _plain_patterns(node: Any) -> Any:
    """``node`` with the class escapes of every ``pattern`` spelled out as classes."""
    if isinstance(node, list):
        return [_plain_patterns(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    out = {key: _plain_patterns(value) for key, value in node.items()}
    if isinstance(node.get("pattern"), str):
        pattern = node["pattern"]
        for escape, spelled in _CLASS_ESCAPES.items():
            pattern = pattern.replace(escape, spelled)
        out["pattern"] = pattern
    return out


class ChatClient(Protocol):
    """Anything that sends a chat request: one provider's client, or all providers'."""

    def chat(self, request: ChatRequest) -> Completion: ...

    def close(self) -> None: ...


# A request waiting for its answer holds a buffer of one socket read, allocated before the
# read blocks: httpcore reads 64 KiB at a time, so a threads worker's 800 requests on the
# wire (200 steps of four calls) held 50 MB of buffers for answers of a few KB
# (bench/in_flight.py: 0.24 MB of PSS per step in flight). Larger answers take more reads.
_ANSWER_READ_BYTES = 16 * 1024
httpcore.HTTP11Connection.READ_NUM_BYTES = _ANSWER_READ_BYTES

# httpcore's connection pool looks at each of its connections for every request it starts
# or ends, and for each idle one at all of them again: with hundreds of connections in one
# pool (a threads worker's steps on the wire) that scan was the worker's largest CPU cost
# (py-spy). Threads share pools of at most this many kept-alive connections instead.
_CONNECTIONS_PER_POOL = 32


class LLMClient:
    """Chat completions against ``base_url`` (``.../v1``): each request ends within
    ``timeout_s`` (an answer still arriving then is cut off), and up to ``connections``
    requests are kept alive for reuse (a threads worker has many on the wire at once), in
    pools of at most 32 connections, each thread keeping to one pool."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        timeout_s: float,
        connections: int = 20,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # No bound of its own on connections: the limiter bounds the calls in flight, and
        # a bound here would make calls past it wait for a connection as if for the provider.
        pools = max(1, math.ceil(connections / _CONNECTIONS_PER_POOL))
        limits = httpx.Limits(
            max_connections=None, max_keepalive_connections=math.ceil(connections / pools)
        )
        # One TLS context for all the pools: each would otherwise load the CA bundle again
        # (0.9 MB of memory a pool).
        tls = httpx.create_ssl_context()
        self._pools = [
            httpx.Client(
                base_url=base_url.rstrip("/"),
                headers=headers,
                timeout=httpx.Timeout(timeout_s),
                transport=_Deadline(
                    transport or httpx.HTTPTransport(limits=limits, verify=tls), timeout_s
                ),
            )
            for _ in range(pools)
        ]
        self._next_pool = itertools.count()
        self._thread = threading.local()

    @property
    def _http(self) -> httpx.Client:
        """This thread's pool (threads take the pools in turn)."""
        try:
            http: httpx.Client = self._thread.http
        except AttributeError:
            http = self._thread.http = self._pools[next(self._next_pool) % len(self._pools)]
        return http

    def close(self) -> None:
        for http in self._pools:
            http.close()

    def chat(self, request: ChatRequest) -> Completion:
        """One completion, or a TransientLLMError / PermanentLLMError. The request's id goes
        out as ``X-Client-Request-Id``, so that a provider's own logs (and the fake
        provider's request log) can be matched with docpipe's call log."""
        if not any(
            m.get("content", "").strip() for m in request.messages if m.get("role") == "user"
        ):
            raise PermanentLLMError(
                "nothing to send: the user message is empty", kind="empty_input"
            )
        started = time.monotonic()
        try:
            headers = {"content-type": "application/json"}
            if request.request_id:
                headers[_REQUEST_ID_HEADER] = request.request_id
            body = json_codec.dumps(request.body())  # (httpx's json= uses the json module)
            response = self._http.post("/chat/completions", content=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise TransientLLMError(f"provider timed out: {exc!r}", kind="timeout") from exc
        except httpx.TransportError as exc:
            raise TransientLLMError(f"provider unreachable: {exc!r}", kind="connection") from exc
        latency = time.monotonic() - started
        _raise_for_status(response)
        return _completion(response, request, latency)


class ProviderClients:
    """Every configured provider's client behind one ``chat``: a request goes to the provider
    that serves its model (ChatRequest.provider), each with its own base URL and key, and as
    many connections kept alive as the provider takes calls at once."""

    def __init__(
        self,
        table: ProviderTable,
        *,
        timeout_s: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._clients = {
            p.name: LLMClient(
                base_url=p.base_url,
                api_key=p.api_key.get_secret_value(),
                timeout_s=timeout_s,
                connections=p.max_concurrency,
                transport=transport,
            )
            for p in table.providers
        }

    def chat(self, request: ChatRequest) -> Completion:
        """The completion from the provider named in ``request``."""
        return self._clients[request.provider].chat(request)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


class _Deadline(httpx.BaseTransport):
    """Ends a request ``timeout_s`` after it started, however its answer arrives: httpx's own
    timeouts bound each read, so an answer sent a few bytes at a time would last forever."""

    def __init__(self, inner: httpx.BaseTransport, timeout_s: float) -> None:
        self._inner = inner
        self._timeout_s = timeout_s

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self._timeout_s
        response = self._inner.handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _BodyBefore(response.stream, deadline, request)
        return response

    def close(self) -> None:
        self._inner.close()


class _BodyBefore(httpx.SyncByteStream):
    """A response body that must have arrived by ``deadline`` (else httpx.ReadTimeout)."""

    def __init__(self, inner: httpx.SyncByteStream, deadline: float, request: httpx.Request):
        self._inner = inner
        self._deadline = deadline
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            if time.monotonic() > self._deadline:
                raise httpx.ReadTimeout("the answer did not arrive in time", request=self._request)
            yield chunk

    def close(self) -> None:
        self._inner.close()


def check_response(response: httpx.Response) -> None:
    """Nothing for a success; the provider's error as TransientLLMError or PermanentLLMError
    (the table above) otherwise."""
    _raise_for_status(response)


def _raise_for_status(response: httpx.Response) -> None:
    status = response.status_code
    if status < 400:
        return
    detail = f"provider answered {status}: {_error_message(response)}"
    limits = rate_limits(response.headers)
    error: TransientLLMError | PermanentLLMError
    if status == 429:
        error = TransientLLMError(
            detail,
            kind="rate_limited",
            http_status=status,
            retry_after=retry_after(response.headers),
        )
    elif status >= 500 or status in (408, 409):
        error = TransientLLMError(
            detail,
            kind="server_error",
            http_status=status,
            retry_after=retry_after(response.headers),
        )
    else:
        kind = {401: "auth", 403: "auth", 404: "not_found", 413: "too_large"}.get(
            status, "bad_request"
        )
        error = PermanentLLMError(detail, kind=kind, http_status=status)
    error.rate_limits = limits
    raise error


def _completion(response: httpx.Response, request: ChatRequest, latency: float) -> Completion:
    try:
        # The envelope only (the answer is a string in it, read by parse_output): orjson.
        body = orjson.loads(response.content)
    except ValueError as exc:
        raise TransientLLMError(
            f"provider sent an unreadable completion: {exc!r}",
            kind="bad_response",
            http_status=response.status_code,
        ) from exc
    return replace(
        read_completion(body, request, http_status=response.status_code, latency_s=latency),
        rate_limits=rate_limits(response.headers),
    )


def read_completion(
    body: Any, request: ChatRequest, *, http_status: int = 200, latency_s: float = 0.0
) -> Completion:
    """The completion a chat-completions answer ``body`` (decoded JSON) holds, as ``chat``
    reads it: from a response, or from a line of a provider batch's output file."""
    try:
        choice = body["choices"][0]
        content = choice["message"]["content"]
        finish_reason = choice.get("finish_reason")
        usage = body.get("usage")
        tokens = None
        if isinstance(usage, dict) and "prompt_tokens" in usage:
            tokens = (int(usage["prompt_tokens"]), int(usage.get("completion_tokens") or 0))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        # A 2xx that is not a completion is the provider's hiccup, not our request's fault.
        raise TransientLLMError(
            f"provider sent an unreadable completion: {exc!r}",
            kind="bad_response",
            http_status=http_status,
        ) from exc
    content = content if isinstance(content, str) else ""
    if finish_reason == "content_filter":
        raise PermanentLLMError(
            "the provider's content filter withheld the answer",
            kind="content_filter",
            http_status=http_status,
        )
    estimated = tokens is None
    if tokens is None:
        # Paid for all the same: charge the estimate rather than nothing.
        tokens = (estimate_prompt_tokens(request.messages), estimate_text_tokens(content))
    return Completion(
        content=content,
        model=str(body.get("model") or request.model),
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        latency_s=latency_s,
        http_status=http_status,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        usage_estimated=estimated,
    )


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])[:500]
    except (ValueError, KeyError, TypeError):
        # Not JSON (a proxy's HTML page) or not OpenAI's shape (a server's own): the text.
        return response.text[:500]


# Token counts estimated before a request is sent, for the TPM limit and the budget check.
#
# docpipe does not ship a tokenizer per model. A prompt is estimated at one token per
# CHARS_PER_TOKEN characters: OpenAI's tokenizers average about four characters per token
# on English prose, so three leaves a margin of a third for numbers, code, other scripts and
# the chat template's own tokens. The answer may use up to its max_tokens, so a request's
# estimate is ceil(prompt characters / 3) + max_tokens; after the call the limiter and the
# call log are corrected from the usage the provider reports.

CHARS_PER_TOKEN = 3
# The role markers a chat template wraps around every message.
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_text_tokens(text: str) -> int:
    """Tokens of ``text``, estimated with the documented margin."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_prompt_tokens(messages: Iterable[Mapping[str, str]]) -> int:
    """Tokens of a chat prompt, estimated with the documented margin."""
    return sum(
        estimate_text_tokens(m.get("content", "")) + MESSAGE_OVERHEAD_TOKENS for m in messages
    )


# Raw newlines and tabs inside strings: grammars of real servers (llama.cpp's) let a model
# write them, and they change nothing about the answer's structure.
_LENIENT_JSON = json.JSONDecoder(strict=False)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_output(
    content: str, schema: Mapping[str, Any], *, strict: bool = False
) -> dict[str, Any]:
    """The JSON object in ``content`` if it satisfies ``schema``, else InvalidOutputError.

    Allowed repairs, because models add them around otherwise good answers: a Markdown code
    fence, prose before the first ``{`` or after the last ``}``, and raw control characters
    inside strings. ``strict``: the answer
    was given to ``strict_schema(schema)``, whose nulls stand for absent optional properties.
    """
    text = content.strip()
    if fenced := _FENCE.match(text):
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise InvalidOutputError(f"no JSON object in the answer: {content[:200]!r}")
    try:
        value = _LENIENT_JSON.decode(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise InvalidOutputError(f"answer is not valid JSON ({exc}): {content[:200]!r}") from None
    if strict:
        value = drop_absent_optionals(value, schema)
    try:
        validate_json(value, schema)
    except jsonschema.ValidationError as exc:
        raise InvalidOutputError(f"answer breaks its schema: {exc.message}") from None
    if not isinstance(value, dict):
        raise InvalidOutputError("answer is not a JSON object")
    return value


# Schema id -> (the schema, its checked validator). The schema is kept so that its id is
# never reused while cached; the bound only matters for callers that build schemas on the fly.
_VALIDATORS: dict[int, tuple[Mapping[str, Any], Any]] = {}
_MAX_VALIDATORS = 256


def validate_json(value: Any, schema: Mapping[str, Any]) -> None:
    """``jsonschema.validate(value, schema)`` (same checks, same error), with the schema
    checked and its validator built once per schema object instead of on every call."""
    cached = _VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(dict(schema))
        if len(_VALIDATORS) >= _MAX_VALIDATORS:
            _VALIDATORS.clear()
        cached = _VALIDATORS[id(schema)] = (schema, cls(schema))
    if (error := jsonschema.exceptions.best_match(cached[1].iter_errors(value))) is not None:
        raise error
