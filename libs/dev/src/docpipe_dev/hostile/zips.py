"""Zips built to cost their reader before anything is inflated: a central directory of a
million members (Python's zipfile builds an entry for each before anyone can count them:
seconds of CPU, on the API's event loop if it is read there)."""

from __future__ import annotations

import struct
import zlib

__all__ = ["many_members"]


def many_members(count: int = 1_000_000, *, declared: int | None = None) -> bytes:
    """A zip of ``count`` directory entries (all naming one empty member, stored), about
    47 bytes each: 47 MB for a million. Its end record declares ``declared`` members
    (default: as many as its 16-bit field holds), so a reader that trusts the count is
    fooled: the directory's size is what zipfile reads."""
    name = b"word/document.xml"
    crc = zlib.crc32(b"")
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, 0, 0, len(name), 0)
    entry = (
        struct.pack(
            "<4sHHHHHHIIIHHHHHII",
            b"PK\x01\x02",
            20,
            20,
            0,
            0,
            0,
            0,
            crc,
            0,
            0,
            len(name),
            0,
            0,
            0,
            0,
            0,
            0,  # the one local header, at offset 0
        )
        + name
    )
    directory = entry * count
    shown = min(count, 0xFFFF) if declared is None else declared
    end = struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, shown, shown, len(directory), len(local) + len(name), 0
    )
    return local + name + directory + end
