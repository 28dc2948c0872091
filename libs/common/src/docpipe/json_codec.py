"""JSON encoding on the hot path: every step sends its requests and writes a round's call
rows and its output as JSON, where orjson is 5-20 times faster than the json module.

Values orjson refuses and the json module encodes (an integer past 64 bits, say in a model's
answer or a pipeline's schema) go through the json module, so nothing that was stored before
fails now. Decoding stays with the json module where tenant data is read back: orjson reads
such an integer as a float and would change the value silently.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["NUL_REFUSED", "dumps", "holds_nul"]


def dumps(value: Any) -> bytes:
    """``value`` as UTF-8 JSON; non-string keys become strings, as the json module makes them."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value, ensure_ascii=False).encode()


# A JSON string's NUL is the escape \u0000 whose backslash follows an even run of backslashes
# (a raw NUL byte is not JSON).
_NUL_ESCAPE = b"\\u0000"
# The scan goes a MiB at a time: one search of a 32 MB batch held the GIL for 18 ms (the API's
# event loop waits behind it); a MiB holds it for under one.
_SCAN_SLICE = 1 << 20
NUL_REFUSED = "a string holds a NUL character (\\u0000), which cannot be stored"


def holds_nul(raw: bytes | bytearray) -> bool:
    """Whether a JSON text has a NUL character in one of its strings: PostgreSQL's text and
    jsonb cannot store one, so tenant JSON holding one is refused before it is written."""
    checked = 0  # the backslashes before it are those of raw[checked:at]: each byte read once
    for start in range(0, len(raw), _SCAN_SLICE):
        end = start + _SCAN_SLICE + len(_NUL_ESCAPE) - 1
        at = raw.find(_NUL_ESCAPE, start, end)
        while 0 <= at < start + _SCAN_SLICE:
            before = raw[checked:at]
            if (len(before) - len(before.rstrip(b"\\"))) % 2 == 0:
                return True
            checked = at + 1
            at = raw.find(_NUL_ESCAPE, at + 1, end)
    return False
