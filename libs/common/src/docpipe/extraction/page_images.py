"""A PDF page as an image for people: rendered upright (the PDF's /Rotate, and the turn
extraction recorded for the page), within a number of pixels, as PNG. Its pixels and the
page's geometry (docpipe.extraction.geometry) share one frame: a box of points times
``width / page width`` is where the words stand on the image."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import BinaryIO

import pypdfium2 as pdfium

__all__ = ["RenderedPage", "render_page"]

# No page is drawn finer than this: past it a larger image shows nothing more.
_MAX_DPI = 200
_POINTS_PER_INCH = 72


@dataclass(frozen=True)
class RenderedPage:
    png: bytes
    width: int
    height: int


def render_page(source: BinaryIO, index: int, *, rotation: int, max_pixels: int) -> RenderedPage:
    """Page ``index`` (0-based) of the PDF in ``source``, turned ``rotation`` degrees
    clockwise from how the PDF shows it, in at most ``max_pixels`` pixels."""
    pdf = pdfium.PdfDocument(source)
    try:
        page = pdf[index]
        try:
            width, height = page.get_size()
            scale = min(math.sqrt(max_pixels / (width * height)), _MAX_DPI / _POINTS_PER_INCH)
            while math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
                scale *= 0.995  # the bitmap's sides are whole pixels, rounded up
            bitmap = page.render(scale=scale, rotation=rotation, may_draw_forms=False)
            try:
                image = bitmap.to_pil()
                buffer = io.BytesIO()
                image.save(buffer, format="PNG")
            finally:
                bitmap.close()
        finally:
            page.close()
    finally:
        pdf.close()
    return RenderedPage(buffer.getvalue(), image.width, image.height)
