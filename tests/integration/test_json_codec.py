"""JSON on the hot path (docpipe.json_codec): orjson's speed, never a value it would change."""

from __future__ import annotations

import json

import pytest
from psycopg.types.json import Jsonb

from docpipe.json_codec import dumps
from docpipe.state.db import Database


def test_what_orjson_refuses_goes_through_the_json_module_unchanged() -> None:
    value = {"amount": 2**70, 1: "one", "name": "Zoë", "ratio": 0.1}
    assert json.loads(dumps(value)) == {"amount": 2**70, "1": "one", "name": "Zoë", "ratio": 0.1}
    assert dumps({"a": [1, 2.5, None, True]}) == b'{"a":[1,2.5,null,true]}'


def test_a_value_neither_module_encodes_is_refused() -> None:
    with pytest.raises(TypeError):
        dumps({"x": object()})


def test_a_json_parameter_past_64_bits_is_stored_and_read_back_exactly(db: Database) -> None:
    value = {"account": 123456789012345678901234, "rows": [{"k": "v"}]}
    with db.session() as s:
        row = s.conn.execute("SELECT %s::jsonb AS v", (Jsonb(value),)).fetchone()
    assert row is not None and row["v"] == value
