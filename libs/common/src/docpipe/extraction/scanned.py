"""A page that is a picture, read as a scan: a PDF page without a usable text layer (drawn by
:mod:`pdf`) or a page of an image file (decoded by :mod:`images`), in grey, read upright by
Tesseract (:mod:`ocr`), with the warnings a person should see and where each word stands in
points on the upright page (the frame page images and quote boxes share)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from PIL import Image

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.geometry import PageGeometry
from docpipe.extraction.limits import too_slow
from docpipe.extraction.ocr import OcrError, OcrTimeout, read_upright
from docpipe.extraction.pages import PageLimits, PageText, PageWarning

__all__ = ["PageImage", "read_page_image"]


@dataclass(frozen=True)
class PageImage:
    image: Image.Image  # grey ("L")
    scale: float  # pixels per point
    dpi: int
    reduced: bool  # below the resolution it had (or was to be drawn at), to fit the bound


def read_page_image(
    index: int,
    rendered: PageImage,
    limits: PageLimits,
    started: float,
    deadline: float | None = None,
) -> PageText:
    """Page ``index`` (0-based) as Tesseract reads ``rendered`` upright, its warnings
    (reduced resolution, OCR out of time, orientation undecided, low confidence) and its
    words' places in points; ``started`` (time.monotonic()) is when its reading began.

    The OCR has its own time limit (past it: the page without text, with a warning) and
    ``deadline``, the caller's (past it: too_slow, the page was not read at all)."""
    page = index + 1
    timeout_s, callers = limits.ocr_page_timeout_s, False
    if deadline is not None and deadline - time.monotonic() < timeout_s:
        timeout_s, callers = deadline - time.monotonic(), True
        if timeout_s <= 0:
            raise too_slow(f"page {page}: no time left for its OCR")
    warnings = []
    if rendered.reduced:
        warnings.append(
            PageWarning(
                "reduced_resolution",
                page,
                rendered.dpi,
                f"page {page} is large: rendered at {rendered.dpi} dpi for OCR",
            )
        )
    try:
        upright = read_upright(
            rendered.image,
            language=limits.ocr_language,
            dpi=rendered.dpi,
            timeout_s=timeout_s,
            low_confidence=limits.ocr_low_confidence,
        )
    except OcrError as exc:
        raise UnreadableDocumentError(f"page {page}: {exc}", kind="ocr_failed") from None
    except OcrTimeout as exc:
        if callers:
            raise too_slow(f"page {page}: its OCR could not end in the time left") from None
        warnings.append(
            PageWarning(
                "ocr_timeout",
                page,
                limits.ocr_page_timeout_s,
                f"page {page}: {exc}; its text is missing",
            )
        )
        return PageText(
            index, "", ocr=True, seconds=time.monotonic() - started, warnings=tuple(warnings)
        )
    read = upright.read
    if upright.undecided:
        warnings.append(
            PageWarning(
                "orientation_undecided",
                page,
                None,
                f"page {page}: which way is up could not be told; it was read as it lies",
            )
        )
    if read.confidence is not None and read.confidence < limits.ocr_low_confidence:
        warnings.append(
            PageWarning(
                "low_ocr_confidence",
                page,
                read.confidence,
                f"page {page}: low OCR confidence ({read.confidence:g})",
            )
        )
    words = ((w.start, w.end, (w.left, w.top, w.right, w.bottom)) for w in read.words)
    geometry = PageGeometry.of(upright.size, words, scale=1 / rendered.scale)
    return PageText(
        index,
        read.text,
        ocr=True,
        confidence=read.confidence,
        seconds=time.monotonic() - started,
        warnings=tuple(warnings),
        rotation=upright.rotation,
        geometry=geometry,
    )
