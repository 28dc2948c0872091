"""Keyset cursors: where a page of a list ended, as ``<microseconds since the epoch>.<id>``
(the time and the id of its last row, the order every list here is sorted by). Every
string of :data:`CURSOR_PATTERN` is one a client may send (the OpenAPI document states the
pattern), and a cursor is read back exactly, to the microsecond PostgreSQL keeps."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from docpipe.errors import InvalidRequestError

__all__ = ["CURSOR_PATTERN", "read_cursor", "write_cursor"]

_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# At most 17 digits of microseconds: until the year 5138, within what datetime holds.
CURSOR_PATTERN = rf"^[0-9]{{1,17}}\.{_UUID}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def write_cursor(at: datetime, row_id: str) -> str:
    """The cursor after the row ``row_id`` sorted at ``at``."""
    micros = (at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{row_id}"


def read_cursor(cursor: str) -> tuple[datetime, str]:
    """``(at, id)`` of a cursor :func:`write_cursor` gave; InvalidRequestError otherwise."""
    if not re.fullmatch(CURSOR_PATTERN, cursor):
        raise InvalidRequestError("cursor: not a cursor this API gave (use next_cursor as it came)")
    micros, row_id = cursor.split(".")
    return _EPOCH + timedelta(microseconds=int(micros)), row_id
