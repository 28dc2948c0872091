"""Bounds on what a zip (a DOCX) may expand to, checked before anything is read.

The central directory declares each member's sizes: a total past ``max_bytes``, or a ratio
of expanded to stored bytes past ``max_ratio``, is refused without decompressing anything.
A zip may lie about those sizes (Python's zipfile then stops at the declared size and
reports a bad CRC), so :func:`check_actual_sizes` also inflates each member's raw stream
into a counter, a chunk at a time with nothing kept, and stops at the first chunk past the
bound: a bomb costs at most ``max_bytes`` of inflating, never that much memory.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from dataclasses import dataclass

from docpipe.errors import UnreadableDocumentError

__all__ = ["ZipBounds", "check_actual_sizes", "check_declared_sizes"]

_CHUNK = 64 * 1024
# Members a Word file has: a few dozen parts, a few hundred with embedded media.
_MAX_MEMBERS = 10_000
_LOCAL_HEADER = b"PK\x03\x04"
_LOCAL_HEADER_SIZE = 30


@dataclass(frozen=True)
class ZipBounds:
    max_bytes: int  # all members, expanded
    max_ratio: float  # expanded bytes per stored byte, over the whole archive

    def limit_for(self, stored_bytes: int) -> int:
        return min(self.max_bytes, int(self.max_ratio * max(stored_bytes, 1)))


def _bomb(message: str) -> UnreadableDocumentError:
    return UnreadableDocumentError(message, kind="decompression_bomb")


def _corrupt(message: str) -> UnreadableDocumentError:
    return UnreadableDocumentError(message, kind="corrupt")


def check_declared_sizes(archive: zipfile.ZipFile, stored_bytes: int, bounds: ZipBounds) -> None:
    """Refuse an archive whose central directory declares too much (no decompression)."""
    members = archive.infolist()
    if len(members) > _MAX_MEMBERS:
        raise _bomb(f"the zip has {len(members)} members (at most {_MAX_MEMBERS})")
    declared = sum(m.file_size for m in members)
    if declared > bounds.limit_for(stored_bytes):
        raise _bomb(
            f"the zip declares {declared} bytes expanded from {stored_bytes} (at most "
            f"{bounds.max_bytes} bytes and {bounds.max_ratio:g} times its size)"
        )


def check_actual_sizes(data: bytes, bounds: ZipBounds) -> None:
    """Both checks: what the directory declares, then what the members really inflate to.
    UnreadableDocumentError(decompression_bomb) past the bounds, (corrupt) for a zip that
    cannot be read or whose members are not what its directory says."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise _corrupt(f"not a readable zip ({exc})") from None
    with archive:
        check_declared_sizes(archive, len(data), bounds)
        limit = bounds.limit_for(len(data))
        expanded = 0
        for member in archive.infolist():
            size = _inflated_size(data, member, limit - expanded)
            expanded += size
            if expanded > limit:
                raise _bomb(
                    f"zip member {member.filename[:100]!r} inflates past the bound of {limit} "
                    f"bytes (its directory declared {member.file_size})"
                )
            if size != member.file_size:
                raise _corrupt(
                    f"zip member {member.filename[:100]!r} inflates to {size} bytes, its "
                    f"directory says {member.file_size}"
                )


def _inflated_size(data: bytes, member: zipfile.ZipInfo, budget: int) -> int:
    """The member's real expanded size, counted up to ``budget`` + one chunk."""
    start = member.header_offset
    if data[start : start + 4] != _LOCAL_HEADER:
        raise _corrupt(f"zip member {member.filename[:100]!r} has no local header")
    name_length, extra_length = struct.unpack_from("<HH", data, start + 26)
    begin = start + _LOCAL_HEADER_SIZE + name_length + extra_length
    raw = data[begin : begin + member.compress_size]
    if member.compress_type == zipfile.ZIP_STORED:
        return len(raw)
    if member.compress_type != zipfile.ZIP_DEFLATED:
        raise _corrupt(f"zip member {member.filename[:100]!r} uses an unsupported compression")
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    size, pending = 0, raw
    try:
        while not inflater.eof and size <= budget:
            chunk = inflater.decompress(pending, _CHUNK)
            pending = inflater.unconsumed_tail
            if not chunk and not pending:
                break  # the stream ended early: zipfile reports it when reading
            size += len(chunk)
    except zlib.error as exc:
        raise _corrupt(f"zip member {member.filename[:100]!r} is damaged ({exc})") from None
    return size
