"""PDF pages through pypdfium2 (PDFium), in a process of its own
(:mod:`pdf_process`: each page within a time and a memory limit): each page's text layer
in reading order (:mod:`text_layer`), or when it has none, or none worth reading
(:mod:`quality`), the page rendered in grey within the pixel bound (:mod:`pixels`), turned
by its own /Rotate, and read upright by Tesseract (:mod:`ocr`: turned again when
orientation detection says it was scanned sideways or upside down). Opening classifies
what cannot be read."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import BinaryIO

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.failures import as_unreadable
from docpipe.extraction.geometry import PageGeometry
from docpipe.extraction.pages import PageLimits, PageText, PageWarning
from docpipe.extraction.pdf_process import PdfProcess
from docpipe.extraction.quality import text_layer_score
from docpipe.extraction.scanned import PageImage, read_page_image

__all__ = ["PdfReader"]


class PdfReader:
    """An opened PDF: its page count, and one page's text at a time."""

    def __init__(
        self, source: bytes | BinaryIO, limits: PageLimits, *, deadline: float | None = None
    ) -> None:
        """``source``: the file's bytes, or the file (PDFium reads what it needs of it, as
        it needs it, in its own process); ``deadline`` (time.monotonic()): when opening it
        must have ended."""
        self._limits = limits
        self._pdf = PdfProcess(
            source,
            timeout_s=limits.pdf_page_timeout_s,
            max_bytes=limits.pdf_max_memory_bytes,
            until=deadline,
        )
        try:
            limits.check_page_count(self._pdf.page_count)
        except UnreadableDocumentError:
            self._pdf.close()
            raise
        self.page_count = self._pdf.page_count

    def close(self) -> None:
        self._pdf.close()

    def read_page(self, index: int, *, deadline: float | None = None) -> PageText:
        """The page's text layer in reading order; its OCR when the layer is (nearly) empty,
        or holds no real words and the OCR reads better. Every failure is an
        UnreadableDocumentError (docpipe.extraction.failures), a page of more than
        DOCPIPE_MAX_PAGE_CHARS characters too_much_text; ``deadline`` (time.monotonic()):
        when the page's reading must have ended, its text layer, rendering and OCR
        together (too_slow)."""
        with as_unreadable(f"page {index + 1}"):
            read = self._read_page(index, deadline)
        self._limits.check_page_chars(index + 1, len(read.text))
        return read

    def _read_page(self, index: int, deadline: float | None) -> PageText:
        started = time.monotonic()
        layer = self._pdf.text_layer(index, max_chars=self._limits.max_page_chars, until=deadline)
        native = PageText(
            index,
            layer.text,
            ocr=False,
            seconds=0.0,
            rotation=layer.rotation,
            geometry=PageGeometry.of(layer.size, layer.words),
        )
        score = None
        if len(re.sub(r"\s", "", layer.text)) >= self._limits.ocr_min_text_chars:
            score = text_layer_score(layer.text)
            if score >= self._limits.text_layer_min_score:
                return replace(native, seconds=time.monotonic() - started, text_layer_score=score)
        rendered = self._render(index, deadline)  # as the PDF shows it: turned by its /Rotate
        read = read_page_image(index, rendered, self._limits, started, deadline)
        if score is None:
            return read
        # A text layer without real words: the OCR stands if it reads better.
        if text_layer_score(read.text) <= score:
            return replace(native, seconds=time.monotonic() - started, text_layer_score=score)
        garbage = PageWarning(
            "garbage_text_layer",
            index + 1,
            score,
            f"page {index + 1}: its text layer holds no real words (score "
            f"{score:g}); the page was read by OCR",
        )
        return replace(read, warnings=(garbage, *read.warnings), text_layer_score=score)

    def _render(self, index: int, deadline: float | None) -> PageImage:
        """The page in grey within DOCPIPE_MAX_PAGE_PIXELS, at the render dpi or lower;
        page_too_large when only a dpi below DOCPIPE_OCR_MIN_DPI fits."""
        rendered = self._pdf.render(
            index,
            dpi=self._limits.ocr_render_dpi,
            max_pixels=self._limits.max_page_pixels,
            min_dpi=self._limits.ocr_min_dpi,
            setting="DOCPIPE_MAX_PAGE_PIXELS",
            grayscale=True,
            until=deadline,
        )
        return PageImage(
            rendered.image(), rendered.scale, int(rendered.scale * 72), rendered.reduced
        )
