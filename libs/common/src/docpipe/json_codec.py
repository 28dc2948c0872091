"""JSON encoding on the hot path: every step sends its requests and writes a round's call
rows and its output as JSON, where orjson is 5-20 times faster than the json module.

Values orjson refuses and the json module encodes (an integer past 64 bits, say in a model's
answer or a pipeline's schema) go through the json module, so nothing that was stored before
fails now. Decoding stays with the json module where tenant data is read back: orjson reads
such an integer as a float and would change the value silently.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["NUL_REFUSED", "dumps", "holds_nul"]


def dumps(value: Any) -> bytes:
    """``value`` as UTF-8 JSON; non-string keys become strings, as the json module makes them."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value, ensure_ascii=False).encode()


# A JSON string's NUL is the escape \u0000 behind an even run of backslashes (a raw NUL byte
# is not JSON). The lookbehind starts a match only where a run of backslashes starts, so the
# search stays linear however long the run.
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
NUL_REFUSED = "a string holds a NUL character (\\u0000), which cannot be stored"


def holds_nul(raw: bytes | bytearray) -> bool:
    """Whether a JSON text has a NUL character in one of its strings: PostgreSQL's text and
    jsonb cannot store one, so tenant JSON holding one is refused before it is written."""
    return b"\\u0000" in raw and _NUL_ESCAPE.search(raw) is not None
