"""Pages: what a reader gives for each, the bounds every reader keeps, and how pages join
into one document text with its page map."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.geometry import PageGeometry
from docpipe.extraction.limits import check_page_chars
from docpipe.settings import Settings

__all__ = [
    "PAGE_SEPARATOR",
    "WARNING_KINDS",
    "PageLimits",
    "PageText",
    "PageWarning",
    "join_pages",
]

# Between two pages of the document text: a blank line, like between paragraphs, so a
# heading at the top of a page stays a line of its own.
PAGE_SEPARATOR = "\n\n"

# What extraction may notice on a page; ``value`` is the measure named here.
WARNING_KINDS = (
    "low_ocr_confidence",  # Tesseract's mean word confidence (0-100) below the setting
    "no_text",  # the page gave no text at all (value: null)
    "ocr_timeout",  # OCR ran past its time limit, the page's text is missing (seconds)
    "reduced_resolution",  # a large page rendered below the configured dpi for OCR (dpi)
    "orientation_undecided",  # OCR read poorly and Tesseract could not tell which way is up
    "garbage_text_layer",  # the text layer had no real words and the page was OCRed (score)
)


@dataclass(frozen=True)
class PageWarning:
    """Something extraction noticed on one page: its kind (:data:`WARNING_KINDS`), the
    1-based page, the measure that decided it, and a sentence for people."""

    kind: str
    page: int
    value: float | None
    message: str

    def __post_init__(self) -> None:
        if self.kind not in WARNING_KINDS:
            raise ValueError(f"unknown page warning kind {self.kind!r} (known: {WARNING_KINDS})")

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "page": self.page, "value": self.value, "message": self.message}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PageWarning:
        value = data.get("value")
        return cls(
            str(data["kind"]),
            int(data["page"]),
            None if value is None else float(value),
            str(data["message"]),
        )


@dataclass(frozen=True)
class PageText:
    index: int  # 0-based
    text: str
    ocr: bool
    seconds: float
    confidence: float | None = None
    warnings: tuple[PageWarning, ...] = ()
    # Degrees clockwise the page, as the PDF shows it (turned by its own /Rotate), was
    # turned further to be read upright: what orientation detection found on a scan, or
    # the way a text layer's lines run.
    rotation: int = 0
    # The text layer's share of characters in word-shaped tokens (0-1; None: no layer to
    # judge); below DOCPIPE_TEXT_LAYER_MIN_SCORE the page was OCRed.
    text_layer_score: float | None = None
    # Where the page's words stand (a PDF's; None for a DOCX, which has no page layout).
    geometry: PageGeometry | None = field(default=None, repr=False)


@dataclass(frozen=True)
class PageLimits:
    max_pages: int
    ocr_language: str
    ocr_page_timeout_s: float
    ocr_render_dpi: int
    max_page_pixels: int
    ocr_min_dpi: int
    ocr_min_text_chars: int
    ocr_low_confidence: float
    text_layer_min_score: float
    max_document_chars: int
    max_page_chars: int
    max_part_bytes: int  # a DOCX's XML part, before it is parsed
    pdf_page_timeout_s: float
    pdf_max_memory_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> PageLimits:
        return cls(
            max_pages=settings.max_document_pages,
            ocr_language=settings.ocr_language,
            ocr_page_timeout_s=settings.ocr_page_timeout,
            ocr_render_dpi=settings.ocr_render_dpi,
            max_page_pixels=settings.max_page_pixels,
            ocr_min_dpi=settings.ocr_min_dpi,
            ocr_min_text_chars=settings.ocr_min_text_chars,
            ocr_low_confidence=settings.ocr_low_confidence,
            text_layer_min_score=settings.text_layer_min_score,
            max_document_chars=settings.max_document_chars,
            max_page_chars=settings.max_page_chars,
            max_part_bytes=settings.docx_max_part_bytes,
            pdf_page_timeout_s=settings.pdf_page_timeout,
            pdf_max_memory_bytes=settings.pdf_max_memory_bytes,
        )

    def check_page_count(self, pages: int) -> None:
        if pages > self.max_pages:
            raise UnreadableDocumentError(
                f"the document has {pages} pages (at most {self.max_pages}, "
                "DOCPIPE_MAX_DOCUMENT_PAGES)",
                kind="too_many_pages",
            )

    def check_page_chars(self, page: int, chars: int) -> None:
        """too_much_text when page ``page`` (1-based) holds more than max_page_chars."""
        check_page_chars(page, chars, self.max_page_chars)


def join_pages(texts: Sequence[str]) -> tuple[str, tuple[int, ...]]:
    """The document text and the offset where each page starts in it."""
    starts, offset = [], 0
    for i, text in enumerate(texts):
        starts.append(offset)
        offset += len(text) + (len(PAGE_SEPARATOR) if i < len(texts) - 1 else 0)
    return PAGE_SEPARATOR.join(texts), tuple(starts)
