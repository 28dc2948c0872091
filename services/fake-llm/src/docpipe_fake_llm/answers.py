"""What the fake model answers a chat request, whichever door it came through: a completion
request of its own, or one line of a batch (docpipe_fake_llm.batch_store)."""

from __future__ import annotations

import json
import math
from typing import Any

from docpipe_fake_llm.faults import broken_content, invent_quotes
from docpipe_fake_llm.mistakes import Mistakes
from docpipe_fake_llm.protocol import ChatRequest, completion_body
from docpipe_fake_llm.reader import answer_step
from docpipe_fake_llm.schema_answers import answer_schema, fit_to_schema

__all__ = ["completion_for"]


def completion_for(
    chat: ChatRequest, mistakes: Mistakes, fault: str | None = None
) -> dict[str, Any]:
    """The chat.completion body ``chat`` gets, shaped by an answer ``fault`` ("malformed",
    "invalid", "length", "invented_quote") if any; reader.StepInputError when a docpipe
    step's input cannot be read (the provider answers 400)."""
    if fault == "malformed":
        content = broken_content("malformed", chat.step or "")
    elif fault == "invalid":
        content = broken_content("invalid", chat.step or "")
    else:
        value = _answer_value(chat, mistakes)
        if fault == "invented_quote":
            value = invent_quotes(value)
        content = json.dumps(value) if value is not None else _echo(chat.user_content)
    # An answer longer than max_tokens is cut there, as a model's is.
    limit = 1 if fault == "length" else chat.max_tokens
    finish_reason = "stop"
    if limit is not None and math.ceil(len(content) / 4) > limit:
        content, finish_reason = content[: limit * 4], "length"
    return completion_body(chat.model, content, chat.prompt_chars, finish_reason)


def _answer_value(chat: ChatRequest, mistakes: Mistakes) -> Any:
    """docpipe's own steps get the answers a real model gives them (fitted to a strict
    schema: what the text does not state is null); any other request gets one derived from
    its schema and the text. Either with the mistakes the model is told to make."""
    if chat.step is not None:
        value = answer_step(chat.step, chat.user_content)
    elif chat.schema is None:  # plain text: a sentence of what it was sent
        return None
    else:
        value = answer_schema(chat.schema, chat.user_content)
    value = mistakes.apply(
        value,
        model=chat.model,
        prompt_version=chat.prompt_version,
        text=chat.user_content,
        schema=chat.schema,
    )
    return fit_to_schema(value, chat.schema, chat.user_content) if chat.schema else value


def _echo(text: str) -> str:
    return "You wrote: " + " ".join(text.split()[:30])
