"""One OpenAI-compatible chat-completions client; every failure leaves it as a docpipe error.

The mapping is the whole retry policy of docpipe: what is transient here is retried with
backoff, what is permanent fails the run at once.

=========================================  ==========================================
what happened                              raised
=========================================  ==========================================
timeout, connection refused/reset          TransientLLMError(kind="timeout"/"connection")
429                                        TransientLLMError(kind="rate_limited", retry_after)
500-599, 408, 409 (and 529 "overloaded")   TransientLLMError(kind="server_error")
other 4xx                                  PermanentLLMError(kind="bad_request"/"auth"/...)
2xx without a usable message               TransientLLMError(kind="bad_response")
=========================================  ==========================================
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import jsonschema

from docpipe.errors import InvalidOutputError, PermanentLLMError, TransientLLMError

__all__ = ["Completion", "LLMClient", "parse_output", "validate_json"]

Message = Mapping[str, str]
_REQUEST_ID_HEADER = "X-Client-Request-Id"


@dataclass(frozen=True)
class Completion:
    content: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    http_status: int


class LLMClient:
    """Chat completions against ``base_url`` (``.../v1``) with its own timeout."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        timeout_s: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def chat(
        self, *, model: str, messages: Sequence[Message], request_id: str | None = None
    ) -> Completion:
        """One completion in JSON mode, or a TransientLLMError / PermanentLLMError.

        ``request_id`` goes out as ``X-Client-Request-Id``, so that a provider's own logs
        (and the fake provider's request log) can be matched with docpipe's call log."""
        if not any(m.get("content", "").strip() for m in messages if m.get("role") == "user"):
            raise PermanentLLMError(
                "nothing to send: the user message is empty", kind="empty_input"
            )
        body = {
            "model": model,
            "messages": list(messages),
            "response_format": {"type": "json_object"},
            "temperature": 0,
        }
        started = time.monotonic()
        try:
            headers = {_REQUEST_ID_HEADER: request_id} if request_id else None
            response = self._http.post("/chat/completions", json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise TransientLLMError(f"provider timed out: {exc!r}", kind="timeout") from exc
        except httpx.TransportError as exc:
            raise TransientLLMError(f"provider unreachable: {exc!r}", kind="connection") from exc
        latency = time.monotonic() - started
        _raise_for_status(response)
        return _completion(response, model, latency)


def _raise_for_status(response: httpx.Response) -> None:
    status = response.status_code
    if status < 400:
        return
    detail = f"provider answered {status}: {_error_message(response)}"
    if status == 429:
        raise TransientLLMError(
            detail, kind="rate_limited", http_status=status, retry_after=_retry_after(response)
        )
    if status >= 500 or status in (408, 409):
        raise TransientLLMError(
            detail, kind="server_error", http_status=status, retry_after=_retry_after(response)
        )
    kind = {401: "auth", 403: "auth", 404: "not_found", 413: "too_large"}.get(status, "bad_request")
    raise PermanentLLMError(detail, kind=kind, http_status=status)


def _completion(response: httpx.Response, model: str, latency: float) -> Completion:
    try:
        body = response.json()
        content = body["choices"][0]["message"]["content"]
        usage = body.get("usage") or {}
        input_tokens = int(usage.get("prompt_tokens", 0))
        output_tokens = int(usage.get("completion_tokens", 0))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        # A 2xx that is not a completion is the provider's hiccup, not our request's fault.
        raise TransientLLMError(
            f"provider sent an unreadable completion: {exc!r}",
            kind="bad_response",
            http_status=response.status_code,
        ) from exc
    return Completion(
        content=content if isinstance(content, str) else "",
        model=str(body.get("model") or model),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        latency_s=latency,
        http_status=response.status_code,
    )


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])[:500]
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the provider asks us to wait: ``retry-after-ms`` first, then ``Retry-After``."""
    if (ms := response.headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # the HTTP-date form
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_output(content: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object in ``content`` if it satisfies ``schema``, else InvalidOutputError.

    Allowed repairs, because models add them around otherwise good answers: a Markdown code
    fence, and prose before the first ``{`` or after the last ``}``.
    """
    text = content.strip()
    if fenced := _FENCE.match(text):
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise InvalidOutputError(f"no JSON object in the answer: {content[:200]!r}")
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise InvalidOutputError(f"answer is not valid JSON ({exc}): {content[:200]!r}") from None
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
