"""PDF pages through pypdfium2 (PDFium): each page's text layer in reading order
(:mod:`text_layer`), or when it has none, or none worth reading (:mod:`quality`), the page
rendered in grey, turned by its own /Rotate, and read upright by Tesseract (:mod:`ocr`:
turned again when orientation detection says it was scanned sideways or upside down).
Opening classifies what cannot be read."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace
from typing import BinaryIO

import pypdfium2 as pdfium
from PIL import Image

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.geometry import PageGeometry
from docpipe.extraction.ocr import OcrTimeout, read_upright
from docpipe.extraction.pages import PageLimits, PageText, PageWarning
from docpipe.extraction.quality import text_layer_score
from docpipe.extraction.text_layer import read_text_layer

__all__ = ["PdfReader"]

# PDFium's FPDF_GetLastError codes (fpdfview.h).
_ERR_FORMAT, _ERR_PASSWORD, _ERR_SECURITY = 3, 4, 5
_POINTS_PER_INCH = 72
# Every PDF body is "N G obj ... endobj"; a file with the magic number and none of these (in
# its first megabytes) is something else wearing a PDF header.
_OBJECT = re.compile(rb"\d+\s+\d+\s+obj\b")
_SEARCHED_BYTES = 4_000_000


@dataclass(frozen=True)
class _Rendered:
    image: Image.Image
    dpi: int
    reduced: bool  # rendered below the configured resolution to stay within max pixels


class PdfReader:
    """An opened PDF: its page count, and one page's text at a time."""

    def __init__(self, source: bytes | BinaryIO, limits: PageLimits) -> None:
        """``source``: the file's bytes, or the file (PDFium reads what it needs of it, as
        it needs it)."""
        self._limits = limits
        try:
            self._pdf = pdfium.PdfDocument(source)
        except pdfium.PdfiumError as exc:
            raise _unreadable(_start_of(source), exc) from None
        self.page_count = len(self._pdf)
        limits.check_page_count(self.page_count)

    def close(self) -> None:
        self._pdf.close()

    def read_page(self, index: int) -> PageText:
        """The page's text layer in reading order; its OCR when the layer is (nearly) empty,
        or holds no real words and the OCR reads better."""
        started = time.monotonic()
        try:
            page = self._pdf[index]
        except pdfium.PdfiumError as exc:
            raise UnreadableDocumentError(
                f"page {index + 1} cannot be loaded ({exc})", kind="corrupt"
            ) from None
        try:
            layer = read_text_layer(page)
            text = layer.layout.text
            native = PageText(index, text, ocr=False, seconds=0.0, rotation=layer.rotation,
                              geometry=PageGeometry.of(layer.size, layer.words))  # fmt: skip
            score = None
            if len(re.sub(r"\s", "", text)) >= self._limits.ocr_min_text_chars:
                score = text_layer_score(text)
                if score >= self._limits.text_layer_min_score:
                    return replace(native, seconds=time.monotonic() - started,
                                   text_layer_score=score)  # fmt: skip
            rendered = self._render(page)  # as the PDF shows it: turned by its own /Rotate
        finally:
            page.close()
        read = self._ocr(index, rendered, started)
        if score is None:
            return read
        # A text layer without real words: the OCR stands if it reads better.
        if text_layer_score(read.text) <= score:
            return replace(native, seconds=time.monotonic() - started, text_layer_score=score)
        garbage = PageWarning("garbage_text_layer", index + 1, score,
                              f"page {index + 1}: its text layer holds no real words (score "
                              f"{score:g}); the page was read by OCR")  # fmt: skip
        return replace(read, warnings=(garbage, *read.warnings), text_layer_score=score)

    def _ocr(self, index: int, rendered: _Rendered, started: float) -> PageText:
        limits, page = self._limits, index + 1
        warnings = []
        if rendered.reduced:
            warnings.append(PageWarning("reduced_resolution", page, rendered.dpi,
                                        f"page {page} is large: rendered at {rendered.dpi} dpi "
                                        "for OCR"))  # fmt: skip
        try:
            upright = read_upright(rendered.image, language=limits.ocr_language,
                                   dpi=rendered.dpi, timeout_s=limits.ocr_page_timeout_s,
                                   low_confidence=limits.ocr_low_confidence)  # fmt: skip
        except OcrTimeout as exc:
            warnings.append(PageWarning("ocr_timeout", page, limits.ocr_page_timeout_s,
                                        f"page {page}: {exc}; its text is missing"))  # fmt: skip
            return PageText(index, "", ocr=True, seconds=time.monotonic() - started,
                            warnings=tuple(warnings))  # fmt: skip
        read = upright.read
        if upright.undecided:
            warnings.append(PageWarning("orientation_undecided", page, None,
                                        f"page {page}: which way is up could not be told; "
                                        "it was read as it lies"))  # fmt: skip
        if read.confidence is not None and read.confidence < limits.ocr_low_confidence:
            warnings.append(PageWarning("low_ocr_confidence", page, read.confidence,
                                        f"page {page}: low OCR confidence "
                                        f"({read.confidence:g})"))  # fmt: skip
        words = ((w.start, w.end, (w.left, w.top, w.right, w.bottom)) for w in read.words)
        geometry = PageGeometry.of(upright.size, words, scale=_POINTS_PER_INCH / rendered.dpi)
        return PageText(index, read.text, ocr=True, confidence=read.confidence,
                        seconds=time.monotonic() - started, warnings=tuple(warnings),
                        rotation=upright.rotation, geometry=geometry)  # fmt: skip

    def _render(self, page: pdfium.PdfPage) -> _Rendered:
        width_pt, height_pt = page.get_size()
        dpi = self._limits.ocr_render_dpi
        pixels = (width_pt * dpi / _POINTS_PER_INCH) * (height_pt * dpi / _POINTS_PER_INCH)
        reduced = pixels > self._limits.max_page_pixels
        if reduced:
            dpi = max(1, int(dpi * math.sqrt(self._limits.max_page_pixels / pixels)))
        bitmap = page.render(scale=dpi / _POINTS_PER_INCH, grayscale=True)
        try:
            # A copy: PIL would share the bitmap's buffer, which PDFium frees below.
            image = bitmap.to_pil().copy()
        finally:
            bitmap.close()
        return _Rendered(image, dpi, reduced)


def _start_of(source: bytes | BinaryIO) -> bytes:
    if isinstance(source, bytes):
        return source
    source.seek(0)
    return source.read(_SEARCHED_BYTES)


def _unreadable(data: bytes, exc: pdfium.PdfiumError) -> UnreadableDocumentError:
    code = getattr(exc, "err_code", None)
    if code in (_ERR_PASSWORD, _ERR_SECURITY):
        return UnreadableDocumentError(
            "the PDF is encrypted: it opens only with a password", kind="encrypted"
        )
    if code == _ERR_FORMAT and not _OBJECT.search(data):
        return UnreadableDocumentError(
            "the file starts like a PDF but holds no PDF objects", kind="format_mismatch"
        )
    return UnreadableDocumentError(f"the PDF is damaged or truncated ({exc})", kind="corrupt")
