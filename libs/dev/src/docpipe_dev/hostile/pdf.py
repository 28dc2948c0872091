"""PDFs built to cost far more than their size: pages too large to render within the pixel
bound, a text layer of millions of characters, pages slow to render behind a perfect text
layer. Written object by object here (fpdf2 would refuse most of them)."""

from __future__ import annotations

import zlib

__all__ = [
    "drawn_too_large",
    "huge_page",
    "pdf_of",
    "slow_at_every_stage",
    "slow_to_render",
    "slow_to_render_scan",
    "text_flood",
]

_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
_WORDS = b"This agreement is made between the parties named below."
# Characters a reader takes for a text layer, none in a word-shaped token (its quality
# score is 0): the page is read, judged, then drawn and OCRed.
_NO_WORDS = b"J}F3 Q#9k V@2x Z%7m P&4w K!8n X$5q"


def pdf_of(pages: list[tuple[bytes, bytes]], extra: list[bytes] | None = None) -> bytes:
    """A PDF of pages, each (its MediaBox and resources' dictionary entries, its content
    stream); ``extra`` objects are numbered after the pages' (from ``3 + 2 * pages``), for
    the resources to name. Content streams are compressed."""
    objects: list[bytes] = [b"", b""]  # 1: catalog, 2: page tree, filled in below
    kids = []
    for page, content in pages:
        kids.append(len(objects) + 1)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R " + page + b" /Contents %d 0 R >>" % (len(objects) + 2)
        )
        objects.append(_stream(content))
    objects += extra or []
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    out, offsets = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def _stream(content: bytes, dictionary: bytes = b"") -> bytes:
    packed = zlib.compress(content, 9)
    return (
        b"<< /Length %d /Filter /FlateDecode %s>>\nstream\n" % (len(packed), dictionary)
        + packed
        + b"\nendstream"
    )


def huge_page(points: int = 720_000) -> bytes:
    """One page ``points`` points square (10 km at 720,000) with shapes and no text layer:
    read by OCR, it fits the pixel bound only at a resolution nobody can read."""
    box = b"/MediaBox [0 0 %d %d]" % (points, points)
    shapes = b"".join(
        b"%d %d %d %d re f\n" % (points // 10 * i, points // 10 * i, points // 20, points // 20)
        for i in range(10)
    )
    return pdf_of([(box, shapes)])


def text_flood(chars: int = 2_000_000) -> bytes:
    """A letter-size page whose text layer holds ``chars`` characters (a dense page holds
    about 5,000), drawn in one text object that compresses to a few KB."""
    box = b"/MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >>"
    line = b"(" + b"flood " * 100 + b") Tj 0 -1 Td\n"
    content = b"BT /F1 1 Tf 10 780 Td\n" + line * (chars // 600 + 1) + b"ET"
    return pdf_of([(box % 5, content)], [_FONT])


def slow_to_render(
    draws: int = 200,
    side: int = 20_000,
    *,
    text: bool = True,
    words: bytes = _WORDS,
    pages_before: int = 0,
) -> bytes:
    """A letter-size page that draws one ``side`` x ``side`` black-and-white image (zeros:
    50 KB compressed at the default) ``draws`` times over the page, each draw decoding it
    again: minutes to render. ``text``: with a perfect text layer above it (the worker
    reads it in milliseconds; a page image is what takes the minutes); without, it is a
    scan the worker must render to read. ``words``: the text layer's line;
    ``pages_before``: ordinary pages of ``_WORDS`` before it."""
    font, image = 3 + 2 * (pages_before + 1), 4 + 2 * (pages_before + 1)  # after the pages
    plain = b"/MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >>" % font
    slow = (
        b"/MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 %d 0 R >> /XObject << /Im1 %d 0 R >> >>" % (font, image)
    )
    layer = b"BT /F1 11 Tf 72 720 Td (" + words + b") Tj ET"
    content = b"q 612 0 0 792 0 0 cm /Im1 Do Q\n" * draws + (layer if text else b"")
    before = [(plain, b"BT /F1 11 Tf 72 720 Td (" + _WORDS + b") Tj ET")] * pages_before
    return pdf_of([*before, (slow, content)], [_FONT, _blank_image(side)])


def _blank_image(side: int) -> bytes:
    """A ``side`` x ``side`` 1-bit image of zeros, Flate-compressed row by row."""
    packer, row = zlib.compressobj(9), b"\x00" + bytes((side + 7) // 8)  # predictor byte, row
    packed = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    return (
        (
            b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
            b"/BitsPerComponent 1 /Length %d /Filter /FlateDecode "
            b"/DecodeParms << /Predictor 15 /Columns %d /Colors 1 /BitsPerComponent 1 >> >>\n"
            b"stream\n" % (side, side, len(packed), side)
        )
        + packed
        + b"\nendstream"
    )


def drawn_too_large(points: int = 720_000) -> bytes:
    """A page ``points`` points square with a perfect text layer: the worker reads its
    text; as an image for people it fits the page-image bound only at a fraction of a
    dpi."""
    box = b"/MediaBox [0 0 %d %d] /Resources << /Font << /F1 5 0 R >> >>" % (points, points)
    return pdf_of([(box, b"BT /F1 11 Tf 72 720 Td (" + _WORDS + b") Tj ET")], [_FONT])


def slow_to_render_scan() -> bytes:
    """:func:`slow_to_render` without a text layer: the worker must render it to read it."""
    return slow_to_render(text=False)


def slow_at_every_stage(pages_before: int = 0) -> bytes:
    """:func:`slow_to_render` under a text layer of no real words: its text is read and
    judged, then the page is drawn for OCR (minutes) and OCRed. Each stage has a limit of
    its own, and several stages near their limits add up past the step's soft limit: the
    page must end within the step's time, however its stages share it. ``pages_before``:
    ordinary pages of text before it."""
    return slow_to_render(words=_NO_WORDS, pages_before=pages_before)
