"""A PDF page as an image for people: rendered upright (the PDF's /Rotate, and the turn
extraction recorded for the page), within a number of pixels, as PNG, by PDFium in a
process of its own (:mod:`pdf_process`: within a time and a memory limit). Its pixels and
the page's geometry (docpipe.extraction.geometry) share one frame: a box of points times
``width / page width`` is where the words stand on the image."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from docpipe.extraction.pdf_process import PdfProcess

__all__ = ["RenderedPage", "render_page"]

# No page is drawn finer than this: past it a larger image shows nothing more ...
_MAX_DPI = 200
# ... nor coarser than this: a page that large shows people nothing either.
_MIN_DPI = 10


@dataclass(frozen=True)
class RenderedPage:
    png: bytes
    width: int
    height: int


def render_page(
    source: BinaryIO,
    index: int,
    *,
    rotation: int,
    max_pixels: int,
    timeout_s: float,
    max_bytes: int,
) -> RenderedPage:
    """Page ``index`` (0-based) of the PDF in ``source``, turned ``rotation`` degrees
    clockwise from how the PDF shows it, in at most ``max_pixels`` pixels, drawn within
    ``timeout_s`` and ``max_bytes`` of memory (UnreadableDocumentError otherwise:
    too_slow, too_complex, page_too_large, corrupt)."""
    pdf = PdfProcess(source, timeout_s=timeout_s, max_bytes=max_bytes)
    try:
        rendered = pdf.render(
            index,
            dpi=_MAX_DPI,
            max_pixels=max_pixels,
            min_dpi=_MIN_DPI,
            setting="DOCPIPE_PAGE_IMAGE_MAX_PIXELS",
            rotation=rotation,
            png=True,
            forms=False,
        )
    finally:
        pdf.close()
    return RenderedPage(rendered.data, rendered.width, rendered.height)
