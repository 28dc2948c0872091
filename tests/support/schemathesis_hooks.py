"""schemathesis' hooks for docpipe (SCHEMATHESIS_HOOKS=tests.support.schemathesis_hooks):
values the document describes in words that a JSON Schema cannot state, generated as it says.

- PDF and DOCX bodies are real files (small sample contracts): arbitrary bytes under those
  media types are what a 415 is for, not a request the document allows.
- JSON lines (a batch's results export) are read as the array of their lines, which is how
  the document describes them; JSON lines sent (an evaluation set's items) are the text the
  document describes, sent as it is.
- ``start_at`` lies within DOCPIPE_MAX_START_DELAY_S of now (a bound relative to the clock,
  which a schema cannot write): one further ahead is moved to an hour from now.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis
from hypothesis import strategies as st

from docpipe_dev.sample_files import contract_docx, contract_pdf

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_TEXTS = (
    "SERVICES AGREEMENT\n\n1. TERM\n\nThis Agreement runs for twelve (12) months.",
    "NOTE\n\nThe parties agree.",
)

schemathesis.openapi.media_type(PDF, st.sampled_from([contract_pdf(t) for t in _TEXTS]))
schemathesis.openapi.media_type(DOCX, st.sampled_from([contract_docx(t) for t in _TEXTS]))


@schemathesis.serializer(PDF, DOCX)
def _file_bytes(ctx: schemathesis.SerializationContext, value: bytes) -> bytes:
    return value


@schemathesis.serializer("application/jsonl")
def _text_lines(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


@schemathesis.deserializer("application/x-ndjson")
def _json_lines(ctx: schemathesis.DeserializationContext, response: Any) -> list[Any]:
    return [json.loads(line) for line in response.content.splitlines()]


@schemathesis.hook
def map_body(context: schemathesis.HookContext, body: object) -> object:
    """A start_at more than six days ahead moves to an hour from now (see above)."""
    if isinstance(body, dict) and isinstance(body.get("start_at"), str):
        try:
            start_at = datetime.fromisoformat(body["start_at"])
        except ValueError:
            return body  # not a date-time: the API's 422 is the point
        if start_at.tzinfo is not None and start_at > datetime.now(UTC) + timedelta(days=6):
            return {**body, "start_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
    return body
