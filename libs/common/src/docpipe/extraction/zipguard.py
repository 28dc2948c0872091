"""Bounds on what a zip (a DOCX) may expand to, checked before anything is read.

First the end of its central directory (:func:`check_directory`): the members it declares
and the directory's size, read from the end record alone, before Python's zipfile builds
an entry for every member (a million entries take it seconds, on the API's event loop or
in a worker).

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
from typing import IO

from docpipe.errors import UnreadableDocumentError

__all__ = ["ZipBounds", "check_actual_sizes", "check_declared_sizes", "check_directory"]

_CHUNK = 64 * 1024
# Members a Word file has: a few dozen parts, a few hundred with embedded media.
_MAX_MEMBERS = 10_000
_LOCAL_HEADER = b"PK\x03\x04"
_LOCAL_HEADER_SIZE = 30
# A directory entry is 46 bytes and a name (and extras): a few hundred bytes a member.
_MAX_DIRECTORY_BYTES = _MAX_MEMBERS * 300
# The end record (22 bytes and a comment of up to 64 KiB), and Zip64's.
_END = b"PK\x05\x06"
_END_SIZE = 22
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_LOCATOR_SIZE = 20
_ZIP64_END = b"PK\x06\x06"


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


def check_directory(file: IO[bytes]) -> None:
    """decompression_bomb when the zip's end record declares more members than a Word file
    has, or a larger central directory than they need; read from the end record alone (the
    file is left where it was). A file without one is left to zipfile to refuse."""
    start = file.tell()
    try:
        size = file.seek(0, io.SEEK_END)
        tail_size = min(size, _END_SIZE + 0xFFFF)
        file.seek(size - tail_size)
        tail = file.read(tail_size)
        at = tail.rfind(_END)
        if at < 0 or len(tail) - at < _END_SIZE:
            return
        members, directory_bytes = struct.unpack_from("<HI", tail, at + 10)
        if members == 0xFFFF or directory_bytes == 0xFFFFFFFF:
            members, directory_bytes = _zip64_sizes(file, tail, at, members, directory_bytes)
    finally:
        file.seek(start)
    if members > _MAX_MEMBERS:
        raise _bomb(f"the zip declares {members} members (at most {_MAX_MEMBERS})")
    if directory_bytes > _MAX_DIRECTORY_BYTES:
        raise _bomb(
            f"the zip's directory is {directory_bytes} bytes (at most {_MAX_DIRECTORY_BYTES}: "
            f"{_MAX_MEMBERS} members)"
        )


def _zip64_sizes(
    file: IO[bytes], tail: bytes, at: int, members: int, directory_bytes: int
) -> tuple[int, int]:
    """The Zip64 end record's member count and directory size, when it has one."""
    locator = at - _ZIP64_LOCATOR_SIZE
    if locator < 0 or tail[locator : locator + 4] != _ZIP64_LOCATOR:
        return members, directory_bytes
    (offset,) = struct.unpack_from("<Q", tail, locator + 8)
    file.seek(offset)
    record = file.read(56)
    if len(record) < 56 or record[:4] != _ZIP64_END:
        return members, directory_bytes
    total, size = struct.unpack_from("<QQ", record, 32)
    return int(total), int(size)


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
    check_directory(io.BytesIO(data))
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
