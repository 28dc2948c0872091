"""Documents: how large an upload may be, and how PDFs, Word files and scans are read."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from docpipe.settings.time_limits import Seconds, TimeLimitSettings

__all__ = ["DocumentSettings"]


class DocumentSettings(TimeLimitSettings):
    """Documents and their pages"""

    # Uploads larger than their format's limit are refused with 413 naming it: text (and
    # each text of a batch), PDF and DOCX. A file is read and stored in bounded chunks (the
    # API holds a few MiB of it, whatever its size); PostgreSQL keeps its bytes.
    max_document_bytes: int = Field(
        default=1_000_000,
        ge=1,
        description="larger text uploads, and larger texts in a batch, get 413 naming it",
    )
    max_pdf_bytes: int = Field(
        default=50_000_000,
        ge=1,
        le=1_000_000_000,
        description=(
            "larger PDF uploads get 413 naming it (a scan is about 50-150 kB a page); read and "
            "stored in 1 MiB chunks, so the API's memory does not grow with it"
        ),
    )
    max_docx_bytes: int = Field(
        default=50_000_000,
        ge=1,
        le=1_000_000_000,
        description="larger DOCX uploads get 413 naming it; stored like a PDF",
    )
    max_image_bytes: int = Field(
        default=50_000_000,
        ge=1,
        le=1_000_000_000,
        description=(
            "larger PNG, JPEG or TIFF uploads get 413 naming it; stored like a PDF (what an "
            "image may decode into is `DOCPIPE_MAX_PAGE_PIXELS` a page)"
        ),
    )
    max_document_pages: int = Field(
        default=500,
        ge=1,
        le=100_000,
        description=(
            "a PDF, DOCX or TIFF with more pages fails `too_many_pages` before any page is read"
        ),
    )
    ocr_language: str = Field(
        default="eng",
        pattern=r"^[a-z][a-z_]{2,}(\+[a-z][a-z_]{2,})*$",
        description=(
            "Tesseract's language(s) for pages without a text layer (`eng+deu`); each needs its "
            "Debian `tesseract-ocr-<lang>` package in the worker image"
        ),
    )
    # One page's OCR; a page that takes longer is left without text, with a warning. Unset:
    # half the soft time limit, so that a page started in time ends before the step is
    # interrupted (when set: it must be below the soft time limit).
    ocr_page_timeout_s: Seconds | None = Field(
        default=None,
        description=(
            "one page's OCR; a page that takes longer is left without text, with a warning; must be"
            " below `DOCPIPE_TASK_SOFT_TIME_LIMIT_S`"
        ),
    )
    ocr_render_dpi: int = Field(
        default=300, ge=72, le=600, description="resolution pages are rendered at for OCR"
    )
    max_page_pixels: int = Field(
        default=25_000_000,
        ge=1_000_000,
        le=200_000_000,
        description=(
            "a page is never rendered or decoded into more pixels (a larger PDF page is rendered "
            "at a lower dpi, a larger JPEG decoded at 1/2, 1/4 or 1/8, with a warning; below "
            "`DOCPIPE_OCR_MIN_DPI` it fails `page_too_large`; a larger PNG or TIFF page fails "
            "`page_too_large`, or `decompression_bomb` when its file is tiny for its pixels)"
        ),
    )
    ocr_min_dpi: int = Field(
        default=100,
        ge=20,
        le=600,
        description=(
            "a page that fits in `DOCPIPE_MAX_PAGE_PIXELS` only below this resolution fails "
            "`page_too_large` instead of being OCRed at a resolution nobody can read (at the "
            "defaults: a page larger than about 50 x 50 inches)"
        ),
    )
    ocr_min_text_chars: int = Field(
        default=16,
        ge=1,
        description="a PDF page whose text layer has fewer non-blank characters is OCRed",
    )
    text_layer_min_score: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description=(
            "a PDF page whose text layer has a smaller share (0-1) of its characters in "
            "word-shaped tokens (no real words: a bad earlier OCR, a font without its Unicode "
            "map, a wrong encoding) is OCRed, and the OCR kept when it scores better"
        ),
    )
    ocr_low_confidence: float = Field(
        default=60.0,
        ge=0,
        le=100,
        description="a page OCRed with a lower mean word confidence (0-100) gets a warning",
    )
    page_image_max_pixels: int = Field(
        default=2_000_000,
        ge=100_000,
        le=25_000_000,
        description=(
            "`GET /documents/{id}/pages/{n}`: a PDF page's PNG has at most this many pixels "
            "(an A4 page at about 140 dpi by default); rendered once, kept in PostgreSQL"
        ),
    )
    poor_extraction_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description=(
            "a run of a pipeline with `review_if: [poor_extraction]` pauses for review after "
            "extract_text when more than this share (0-1) of its document's pages were read "
            "poorly (OCR confidence below `DOCPIPE_OCR_LOW_CONFIDENCE`, no text, OCR out of "
            "time), naming them"
        ),
    )
    # A DOCX is a zip: refused when its members expand past this many bytes or this many
    # times its own size (declared in its directory, or found while inflating).
    docx_max_expanded_bytes: int = Field(
        default=100_000_000,
        ge=1_000_000,
        description=(
            "a DOCX whose zip expands past this many bytes fails `decompression_bomb` (refused at "
            "upload when its directory declares it)"
        ),
    )
    docx_max_expansion_ratio: float = Field(
        default=100.0, ge=2, description="... or past this many times its own size"
    )
    # What a file may expand into, counted while it is read (a Word table cell's text
    # repeated in each column it spans and row it merges, list labels, notes), so a small
    # file cannot ask a worker for gigabytes: memory stays proportional to these bounds.
    docx_max_part_bytes: int = Field(
        default=8_000_000,
        ge=100_000,
        le=200_000_000,
        description=(
            "a DOCX part (its XML: the document, its notes, numbering, styles) larger than this "
            "fails `too_complex` before it is parsed (lxml holds about 10-20 times a part's size)"
        ),
    )
    max_document_chars: int = Field(
        default=5_000_000,
        ge=10_000,
        le=100_000_000,
        description=(
            "a PDF or DOCX whose text (repeats included: merged and spanned table cells, list "
            "labels, notes) runs past this many characters fails `too_much_text`, checked while "
            "it is read"
        ),
    )
    max_page_chars: int = Field(
        default=200_000,
        ge=1_000,
        le=100_000_000,
        description=(
            "a PDF page whose text layer (or OCR) holds more characters fails `too_much_text` "
            "(a dense page holds about 5,000); a DOCX's pages are where its author broke them, "
            "so the document's bound holds them"
        ),
    )

    # PDFium reads each PDF in a process of its own: a page it cannot read (or draw) within
    # these ends that process, never a worker or the API.
    pdf_page_timeout_s: Seconds | None = Field(
        default=None,
        description=(
            "reading one PDF page's text layer, or rendering it (for OCR, or as a page image), "
            "in the process that reads the PDF; a page that takes longer fails `too_slow` (its "
            "process is killed); must be below `DOCPIPE_TASK_SOFT_TIME_LIMIT_S`; unset: a third "
            "of it"
        ),
    )
    pdf_max_memory_bytes: int = Field(
        default=512_000_000,
        ge=0,
        description=(
            "memory the process that reads a PDF may take besides the interpreter's; a page "
            "that needs more fails `too_complex` (0: no limit)"
        ),
    )
    # extract_text hands itself back, its attempt refunded, while it makes progress (a long
    # scan read over several deliveries); these cap what that may cost one document.
    max_extraction_deliveries: int = Field(
        default=200,
        ge=2,
        le=100_000,
        description=(
            "deliveries of a document's `extract_text` step (each reads at least one page, then "
            "hands the step back when its time is up); more fail `too_slow`"
        ),
    )
    max_extraction_s: Seconds = Field(
        default=3600.0,
        description=(
            "workers' time reading one document over all of its step's deliveries; past it the "
            "next delivery fails `too_slow`"
        ),
    )

    @model_validator(mode="after")
    def _page_ocr_fits_in_a_step(self) -> Self:
        if self.ocr_page_timeout_s is not None and not (
            self.ocr_page_timeout_s < self.task_soft_time_limit_s
        ):
            raise ValueError(
                f"DOCPIPE_OCR_PAGE_TIMEOUT_S={self.ocr_page_timeout_s:g} must be below "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S={self.task_soft_time_limit_s:g}: a page's OCR "
                f"ends at its own limit, before the soft limit interrupts the step"
            )
        if self.pdf_page_timeout_s is not None and not (
            self.pdf_page_timeout_s < self.task_soft_time_limit_s
        ):
            raise ValueError(
                f"DOCPIPE_PDF_PAGE_TIMEOUT_S={self.pdf_page_timeout_s:g} must be below "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S={self.task_soft_time_limit_s:g}: a page ends "
                "at its own limit, before the soft limit interrupts the step"
            )
        if self.ocr_min_dpi > self.ocr_render_dpi:
            raise ValueError(
                f"DOCPIPE_OCR_MIN_DPI={self.ocr_min_dpi} must not exceed "
                f"DOCPIPE_OCR_RENDER_DPI={self.ocr_render_dpi}: pages are rendered at most at "
                "the render dpi"
            )
        return self

    @property
    def pdf_page_timeout(self) -> float:
        """One PDF page's time limit in the process that reads it: the setting, or a third
        of the soft time limit."""
        if self.pdf_page_timeout_s is not None:
            return self.pdf_page_timeout_s
        return self.task_soft_time_limit_s / 3

    @property
    def ocr_page_timeout(self) -> float:
        """One page's OCR time limit: the setting, or half the soft time limit."""
        if self.ocr_page_timeout_s is not None:
            return self.ocr_page_timeout_s
        return self.task_soft_time_limit_s / 2
