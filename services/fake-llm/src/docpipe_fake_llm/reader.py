"""The fake model itself: reads what a pipeline step sends and writes the answer it expects.

It reads only the text it is sent. Nothing here knows how the sample contracts were made.
"""

from __future__ import annotations

import json
import re
from typing import Any

from docpipe_fake_llm.fields import read_quoted_fields
from docpipe_fake_llm.sections import find_sections
from docpipe_fake_llm.summary import write_summary

__all__ = ["STEPS", "StepInputError", "answer_step"]

STEPS = frozenset({"extract_sections", "extract_fields", "summarize"})

_SECTION_HEADER = re.compile(r"\A\s*Section\s+[^\n]*\n")


class StepInputError(ValueError):
    """The user message is not what the step expects; the provider answers 400."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def answer_step(step: str, user_content: str) -> dict[str, Any]:
    """Return the JSON object that ``step`` answers to ``user_content``."""
    if step == "extract_sections":
        return {"sections": find_sections(user_content)}
    if step == "extract_fields":
        # "Section 7. Fees and Payment\n\n<text>": the header names the section, the text
        # below it is what the fields are read from.
        return {"fields": read_quoted_fields(_SECTION_HEADER.sub("", user_content, count=1))}
    if step == "summarize":
        fields, titles = _summarize_input(user_content)
        return write_summary(fields, titles)
    raise StepInputError(f"unknown docpipe-step {step!r}", "unknown_step")


def _summarize_input(user_content: str) -> tuple[dict[str, Any], list[str]]:
    try:
        payload = json.loads(user_content)
    except ValueError:
        raise StepInputError("summarize expects a JSON object", "invalid_summarize_input") from None
    fields = payload.get("fields") if isinstance(payload, dict) else None
    titles = payload.get("section_titles", []) if isinstance(payload, dict) else None
    if not isinstance(fields, dict) or not isinstance(titles, list):
        raise StepInputError(
            'summarize expects {"fields": {...}, "section_titles": [...]}',
            "invalid_summarize_input",
        )
    return fields, [str(title) for title in titles]
