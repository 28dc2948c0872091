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
# Two lines further apart than this many line heights belong to different paragraphs.
_PARAGRAPH_GAP = 0.8
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
            native = _text_layer(text_page)
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


def _text_layer(text_page: pdfium.PdfTextPage) -> str:
    """The page's text line by line, with a blank line where the vertical gap between two
    lines says a new paragraph starts (PDF keeps no paragraphs, only placed lines; later
    steps read paragraphs and sentences)."""
    rects = [text_page.get_rect(i) for i in range(text_page.count_rects())]
    if not rects:
        return _normalised(text_page.get_text_bounded())
    lines: list[list[tuple[float, float, float, float]]] = []
    for rect in sorted(rects, key=lambda r: (-r[3], r[0])):
        _, bottom, _, top = rect
        same_line = lines and abs((top + bottom) / 2 - _middle(lines[-1])) < (top - bottom) / 2
        if same_line:
            lines[-1].append(rect)
        else:
            lines.append([rect])
    heights = sorted(max(r[3] for r in line) - min(r[1] for r in line) for line in lines)
    paragraph_gap = _PARAGRAPH_GAP * heights[len(heights) // 2]
    parts: list[str] = []
    previous_bottom: float | None = None
    for line in lines:
        top, bottom = max(r[3] for r in line), min(r[1] for r in line)
        if previous_bottom is not None:
            parts.append("\n\n" if previous_bottom - top > paragraph_gap else "\n")
        parts.append(" ".join(text_page.get_text_bounded(*r).strip() for r in line))
        previous_bottom = bottom
    return _normalised("".join(parts))


def _middle(line: list[tuple[float, float, float, float]]) -> float:
    return (max(r[3] for r in line) + min(r[1] for r in line)) / 2


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
