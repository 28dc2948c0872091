"""A JSON body's strings may hold any character PostgreSQL can store: a NUL (the escape
\\u0000) is refused wherever it stands, and a backslash followed by the text "u0000" is
not a NUL."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from docpipe import json_codec
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


def test_the_scan_finds_a_nul_across_its_slices_and_counts_long_runs_of_backslashes() -> None:
    filler = b'{"text": "' + b"x" * ((1 << 20) - 13)
    for at_edge in range(-6, 2):  # the escape straddling the first MiB's end, or not
        body = filler + b"y" * (6 + at_edge) + b'\\u0000"}'
        assert json_codec.holds_nul(body), at_edge
    run = b"\\" * (3 << 20)  # an even run: the text \u0000 after escaped backslashes
    assert not json_codec.holds_nul(b'{"text": "' + run + b'u0000"}')
    assert json_codec.holds_nul(b'{"text": "' + run + b'\\u0000"}')
