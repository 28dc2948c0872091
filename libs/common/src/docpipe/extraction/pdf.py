"""PDF pages through pypdfium2 (PDFium): each page's text layer, or when it has none, the
page rendered in grey and read by Tesseract. Opening classifies what cannot be read."""

from __future__ import annotations

import io
import math
import re
import time
from dataclasses import dataclass

import pypdfium2 as pdfium

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.ocr import OcrTimeout, read_image
from docpipe.extraction.pages import PageLimits, PageText

__all__ = ["PdfReader"]

# PDFium's FPDF_GetLastError codes (fpdfview.h).
_ERR_FORMAT, _ERR_PASSWORD, _ERR_SECURITY = 3, 4, 5
_POINTS_PER_INCH = 72
# Every PDF body is "N G obj ... endobj"; a file with the magic number and none of these is
# something else wearing a PDF header.
_OBJECT = re.compile(rb"\d+\s+\d+\s+obj\b")


@dataclass(frozen=True)
class _Rendered:
    png: bytes
    dpi: int
    reduced: bool  # rendered below the configured resolution to stay within max pixels


class PdfReader:
    """An opened PDF: its page count, and one page's text at a time."""

    def __init__(self, data: bytes, limits: PageLimits) -> None:
        self._limits = limits
        try:
            self._pdf = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            raise _unreadable(data, exc) from None
        self.page_count = len(self._pdf)
        limits.check_page_count(self.page_count)

    def close(self) -> None:
        self._pdf.close()

    def read_page(self, index: int) -> PageText:
        """The page's text layer, or its OCR when the layer is (nearly) empty."""
        started = time.monotonic()
        try:
            page = self._pdf[index]
        except pdfium.PdfiumError as exc:
            raise UnreadableDocumentError(
                f"page {index + 1} cannot be loaded ({exc})", kind="corrupt"
            ) from None
        try:
            text_page = page.get_textpage()
            native = _normalised(text_page.get_text_bounded())
            text_page.close()
            if len(re.sub(r"\s", "", native)) >= self._limits.ocr_min_text_chars:
                return PageText(index, native, ocr=False, seconds=time.monotonic() - started)
            rendered = self._render(page)
        finally:
            page.close()
        warning = None
        if rendered.reduced:
            warning = f"page {index + 1} is large: rendered at {rendered.dpi} dpi for OCR"
        try:
            read = read_image(
                rendered.png,
                language=self._limits.ocr_language,
                dpi=rendered.dpi,
                timeout_s=self._limits.ocr_page_timeout_s,
            )
        except OcrTimeout as exc:
            return PageText(index, "", ocr=True, seconds=time.monotonic() - started,
                            warning=f"page {index + 1}: {exc}; its text is missing")  # fmt: skip
        if read.confidence is not None and read.confidence < self._limits.ocr_low_confidence:
            warning = f"page {index + 1}: low OCR confidence ({read.confidence:g})"
        return PageText(index, read.text, ocr=True, confidence=read.confidence,
                        seconds=time.monotonic() - started, warning=warning)  # fmt: skip

    def _render(self, page: pdfium.PdfPage) -> _Rendered:
        width_pt, height_pt = page.get_size()
        dpi = self._limits.ocr_render_dpi
        pixels = (width_pt * dpi / _POINTS_PER_INCH) * (height_pt * dpi / _POINTS_PER_INCH)
        reduced = pixels > self._limits.max_page_pixels
        if reduced:
            dpi = max(1, int(dpi * math.sqrt(self._limits.max_page_pixels / pixels)))
        bitmap = page.render(scale=dpi / _POINTS_PER_INCH, grayscale=True)
        try:
            image = bitmap.to_pil()
            buffer = io.BytesIO()
            image.save(buffer, format="PNG", compress_level=1)
        finally:
            bitmap.close()
        return _Rendered(buffer.getvalue(), dpi, reduced)


def _normalised(text: str) -> str:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


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
