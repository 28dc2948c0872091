"""The OpenAI chat-completions wire format: parsing requests, shaping answers and errors."""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from docpipe_fake_llm.reader import STEPS

__all__ = [
    "DEFAULT_RESERVED_TOKENS",
    "ChatRequest",
    "ProtocolError",
    "completion_body",
    "error_body",
    "parse_chat_request",
    "stream_chunks",
    "strict_problem",
]

_STEP_HEADER = re.compile(r"\A\s*docpipe-step:[ \t]*(\S+)")
_PROMPT_VERSION = re.compile(r"^prompt-version:[ \t]*(\S+)", re.MULTILINE)


class ProtocolError(Exception):
    """A request the provider refuses before reading it; carries the OpenAI error fields."""

    def __init__(self, status: int, message: str, code: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return error_body(str(self), self.kind, self.code)


@dataclass(frozen=True)
class ChatRequest:
    model: str
    step: str | None  # a docpipe step the fake answers like the real model would
    user_content: str
    prompt_chars: int
    response_type: str = "text"  # text | json_object | json_schema
    schema: dict[str, Any] | None = None
    max_tokens: int | None = None
    stream: bool = False
    include_usage: bool = False
    prompt_version: str | None = None  # from the system prompt's "prompt-version:" line

    @property
    def prompt_tokens(self) -> int:
        return math.ceil(self.prompt_chars / 4)


_SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# What a request without max_tokens reserves of the tokens-per-minute limit.
DEFAULT_RESERVED_TOKENS = 1024


def parse_chat_request(raw: bytes) -> ChatRequest:
    """Return what the request asks, or raise 400 as OpenAI would."""
    try:
        body = json.loads(raw)
    except ValueError:
        raise _invalid("request body is not valid JSON", "invalid_json") from None
    if not isinstance(body, dict):
        raise _invalid("request body must be a JSON object", "invalid_body")
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str) or not model:
        raise _invalid("'model' must be a non-empty string", "invalid_model")
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty list", "invalid_messages")
    texts = [(m.get("role"), _text(m)) if isinstance(m, dict) else (None, None) for m in messages]
    if any(not isinstance(role, str) or text is None for role, text in texts):
        raise _invalid("each message needs a string 'role' and 'content'", "invalid_messages")
    system = next((text for role, text in texts if role == "system"), "") or ""
    user = next((text for role, text in reversed(texts) if role == "user"), "") or ""
    if not user.strip():
        raise _invalid("the user message is missing or empty", "empty_content")
    response_type, schema = _response_format(body.get("response_format"))
    header = _STEP_HEADER.match(system)
    step = header[1] if header and header[1] in STEPS else None
    if step is None and response_type == "json_object":
        if header is None:
            raise _invalid(
                "the first system message must start with 'docpipe-step: <step>', "
                "or the request must ask for a json_schema response_format",
                "missing_step_header",
            )
        raise _invalid(
            f"unknown docpipe-step {header[1]!r} (and no json_schema to answer to)", "unknown_step"
        )
    return ChatRequest(
        model=model,
        step=step,
        user_content=user,
        prompt_chars=sum(len(text or "") for _, text in texts),
        response_type=response_type,
        schema=schema,
        max_tokens=_max_tokens(body),
        stream=body.get("stream") is True,
        include_usage=isinstance(body.get("stream_options"), dict)
        and body["stream_options"].get("include_usage") is True,
        prompt_version=version[1] if (version := _PROMPT_VERSION.search(system)) else None,
    )


def _text(message: dict[str, Any]) -> str | None:
    """A message's text: a string, or the text parts of a list of content parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return None


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _invalid("max_tokens must be a positive integer", "invalid_max_tokens")
    return value


def _response_format(value: Any) -> tuple[str, dict[str, Any] | None]:
    if value is None:
        return "text", None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("text", "json_object"):
        return kind, None
    if kind != "json_schema":
        raise _invalid(
            "response_format.type must be text, json_object or json_schema",
            "invalid_response_format",
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise _invalid(
            "response_format.json_schema needs a 'name' and a 'schema'", "invalid_response_format"
        )
    name, schema = spec["name"], spec.get("schema")
    if not _SCHEMA_NAME.match(name):
        raise _invalid(
            f"Invalid 'response_format.json_schema.name': {name!r}", "invalid_response_format"
        )
    if not isinstance(schema, dict):
        raise _invalid(
            "response_format.json_schema.schema must be an object", "invalid_response_format"
        )
    if spec.get("strict") is True and (problem := _strict_problem_of(json.dumps(schema))):
        raise _invalid(
            f"Invalid schema for response_format '{name}': {problem}", "invalid_json_schema"
        )
    return "json_schema", schema


def strict_problem(schema: dict[str, Any]) -> str | None:
    """What OpenAI's strict mode would refuse in ``schema`` (the main rules), or None."""
    if schema.get("type") != "object":
        return "the root must be an object, not " + repr(schema.get("type", "anyOf"))

    def walk(node: Any, context: tuple[str, ...]) -> str | None:
        if not isinstance(node, dict):
            return None
        types = node.get("type")
        types = [types] if isinstance(types, str) else list(types or [])
        if "object" in types:
            properties = node.get("properties") or {}
            if node.get("additionalProperties") is not False:
                return (
                    f"In context={context}, 'additionalProperties' is required to be "
                    "supplied and to be false."
                )
            missing = [p for p in properties if p not in node.get("required", [])]
            if missing:
                return (
                    f"In context={context}, 'required' is required to be supplied and to be "
                    f"an array including every key in properties. Missing {missing[0]!r}."
                )
        children: list[tuple[Any, tuple[str, ...]]] = [
            (sub, (*context, "properties", name))
            for name, sub in (node.get("properties") or {}).items()
        ]
        children += [(node.get("items"), (*context, "items"))]
        children += [(b, (*context, "anyOf", str(i))) for i, b in enumerate(node.get("anyOf", []))]
        children += [(d, ("$defs", n)) for n, d in (node.get("$defs") or {}).items()]
        for child, where in children:
            if problem := walk(child, where):
                return problem
        return None

    return walk(schema, ())


@lru_cache(maxsize=64)
def _strict_problem_of(schema_json: str) -> str | None:
    """strict_problem of a schema sent as this JSON: a client sends the same few schemas
    (one a step) with every call, and walking the largest for each of hundreds of calls a
    second was a sixth of the fake provider's CPU (bench.in_flight)."""
    return strict_problem(json.loads(schema_json))


def completion_body(
    model: str, content: str, prompt_chars: int, finish_reason: str = "stop"
) -> dict[str, Any]:
    """Return a chat.completion whose token counts are ceil(characters / 4)."""
    prompt_tokens, completion_tokens = math.ceil(prompt_chars / 4), math.ceil(len(content) / 4)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(message: str, kind: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def _invalid(message: str, code: str) -> ProtocolError:
    return ProtocolError(400, message, code)


def stream_chunks(body: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A completion as the chat.completion.chunk events of ``stream=True``: the role, the
    content in pieces, the finish reason, then (if asked) one chunk with only the usage."""
    choice = body["choices"][0]
    content = choice["message"]["content"]
    size = max(1, math.ceil(len(content) / 3))
    pieces = [content[i : i + size] for i in range(0, len(content), size)] or [""]
    base = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    deltas = [{"role": "assistant", "content": ""}, *({"content": p} for p in pieces)]
    chunks = [base | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append(
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}
    )
    if include_usage:
        chunks.append(base | {"choices": [], "usage": body["usage"]})
    return chunks
