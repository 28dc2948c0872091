"""Images built to cost far more than their size: PNGs whose header states hundreds of
millions of pixels in a file of a few hundred KB (their zlib stream of zero rows is real, so
a reader that trusts them decodes all of it), and a TIFF of more pages than any document
may have. Written chunk by chunk here: nothing needs to hold the pixels they state."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

__all__ = ["png_bomb", "png_grey_flood", "tiff_of_many_pages"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Rows go into the compressor this many at a time, so making a bomb holds little memory.
_ROWS_A_CHUNK = 512


def png_bomb(side: int = 30_000) -> bytes:
    """A black-and-white PNG ``side`` pixels square (900 M pixels at 30,000) in about
    110 KB: past what PIL itself agrees to decode."""
    return _png_of_zero_rows(side, side, bit_depth=1)


def png_grey_flood(side: int = 10_000) -> bytes:
    """A grey PNG ``side`` pixels square (100 M pixels, 100 MB decoded at 10,000) in about
    100 KB: within PIL's own limit, past docpipe's."""
    return _png_of_zero_rows(side, side, bit_depth=8)


def tiff_of_many_pages(pages: int = 600) -> bytes:
    """A TIFF of ``pages`` one-pixel pages: more than DOCPIPE_MAX_DOCUMENT_PAGES (500)."""
    frames = [Image.new("1", (1, 1), 1) for _ in range(pages)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="TIFF", save_all=True, append_images=frames[1:])
    return buffer.getvalue()


def _png_of_zero_rows(width: int, height: int, *, bit_depth: int) -> bytes:
    """A greyscale PNG of ``width`` x ``height`` black pixels: IHDR, one IDAT of the zlib
    stream of its rows (each a filter byte and its zeros), IEND."""
    row = b"\x00" * (1 + (width * bit_depth + 7) // 8)
    packer = zlib.compressobj(9)
    data = bytearray()
    for first in range(0, height, _ROWS_A_CHUNK):
        data += packer.compress(row * min(_ROWS_A_CHUNK, height - first))
    data += packer.flush()
    header = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)
    return (
        _PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", bytes(data))
        + _chunk(b"IEND", b"")
    )


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
