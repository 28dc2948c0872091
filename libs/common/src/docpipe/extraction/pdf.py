"""PDF pages through pypdfium2 (PDFium): each page's text layer, or when it has none, the
page rendered in grey, turned by its own /Rotate, and read upright by Tesseract (turned
again when orientation detection says it was scanned sideways or upside down). Opening
classifies what cannot be read."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import pypdfium2 as pdfium
from PIL import Image

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.ocr import OcrTimeout, read_upright
from docpipe.extraction.pages import PageLimits, PageText, PageWarning

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
    image: Image.Image
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
            rendered = self._render(page)  # as the PDF shows it: turned by its own /Rotate
        finally:
            page.close()
        return self._ocr(index, rendered, started)

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
        return PageText(index, read.text, ocr=True, confidence=read.confidence,
                        seconds=time.monotonic() - started, warnings=tuple(warnings),
                        rotation=upright.rotation)  # fmt: skip

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
