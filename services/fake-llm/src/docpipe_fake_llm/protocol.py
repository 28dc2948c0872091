"""The OpenAI chat-completions wire format: parsing requests, shaping answers and errors."""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from docpipe_fake_llm.reader import STEPS

__all__ = ["ChatRequest", "ProtocolError", "completion_body", "error_body", "parse_chat_request"]

_STEP_HEADER = re.compile(r"\A\s*docpipe-step:[ \t]*(\S+)")


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
    step: str
    user_content: str
    prompt_chars: int


def parse_chat_request(raw: bytes) -> ChatRequest:
    """Return the request's model, docpipe step and last user message, or raise 400."""
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
    for message in messages:
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise _invalid("each message needs a string 'role' and 'content'", "invalid_messages")
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    header = _STEP_HEADER.match(system)
    if header is None:
        raise _invalid("the first system message must start with 'docpipe-step: <step>'",
                       "missing_step_header")  # fmt: skip
    if header[1] not in STEPS:
        raise _invalid(f"unknown docpipe-step {header[1]!r}", "unknown_step")
    user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if not user.strip():
        raise _invalid("the user message is missing or empty", "empty_content")
    return ChatRequest(model, header[1], user, sum(len(m["content"]) for m in messages))


def completion_body(model: str, content: str, prompt_chars: int) -> dict[str, Any]:
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
                "finish_reason": "stop",
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
