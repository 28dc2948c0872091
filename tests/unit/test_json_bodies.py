"""A JSON body's strings may hold any character PostgreSQL can store: a NUL (the escape
\\u0000) is refused wherever it stands, and a backslash followed by the text "u0000" is
not a NUL."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from docpipe.errors import InvalidRequestError
from docpipe_api.bodies import parsed_json


class Note(BaseModel):
    text: str
    extra: dict[str, object] = {}


@pytest.mark.parametrize(
    "body",
    [
        rb'{"text": "a\u0000b"}',
        rb'{"text": "ok", "extra": {"deep": ["x\u0000"]}}',
        rb'{"text": "\\\u0000"}',  # an escaped backslash, then a NUL
    ],
)
def test_a_nul_in_any_string_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidRequestError, match="NUL"):
        parsed_json(Note, body)


@pytest.mark.parametrize("body", [rb'{"text": "C:\\u0000dir"}', rb'{"text": "\\\\u0000"}'])
def test_a_backslash_before_the_text_u0000_is_not_a_nul(body: bytes) -> None:
    assert "u0000" in parsed_json(Note, body).text
