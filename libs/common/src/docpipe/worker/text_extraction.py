"""The ``extract_text`` step as the worker runs it: the document's pages read one by one,
each memoised in PostgreSQL before the next starts, then the text and page map written
onto the document once.

A worker killed on page 31 of a 40-page scan leaves pages 1-30 on record; the next attempt
reads page 31 again (``document_page.attempts`` = 2) and goes on. A long scan does not need
a long time limit either: once the time left in the task could not fit another page, the
step hands itself back (:class:`ExtractionContinues`, which uses up no attempt) and the
next delivery continues where it stopped.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Any, BinaryIO, Protocol

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.formats import DocumentFormat, require_format
from docpipe.extraction.pages import PageLimits, PageText, PageWarning, join_pages
from docpipe.extraction.pdf import PdfReader
from docpipe.extraction.zipguard import ZipBounds
from docpipe.settings import Settings
from docpipe.state import documents
from docpipe.state.db import Database
from docpipe.state.documents import FinishedPage

__all__ = ["ExtractionContinues", "extract_document_text", "open_reader"]

log = logging.getLogger(__name__)

# What a task needs after its last page: writing the text, recording the step, a margin.
_FINISHING_S = 2.0
# Enough of a file's start to tell a PDF (its header is within the first KiB).
_HEAD_BYTES = 4096


class ExtractionContinues(Exception):
    """The pages read so far are on record; the rest wait for the step's next delivery."""


class _Reader(Protocol):
    page_count: int

    def read_page(self, index: int) -> PageText: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class _Document:
    tenant_id: str
    document_id: str


def extract_document_text(
    db: Database, settings: Settings, tenant_id: str, document_id: str
) -> dict[str, Any]:
    """The step's output (format, pages, OCR, warnings), after the document's text is on
    record. UnreadableDocumentError when the file cannot give text; ExtractionContinues
    when the task's time is up before the last page."""
    started = time.monotonic()
    source = documents.document_for_extraction(db, tenant_id, document_id)
    if source.known_summary is not None:
        # A text document, or a file extracted for another run (as create_run records it
        # when it knows the text; its emptiness is extract_sections' to judge).
        return source.known_summary
    fmt = DocumentFormat(source.format)
    doc = _Document(tenant_id, document_id)
    # The file is copied out of PostgreSQL a chunk at a time into a file of its own (gone
    # when closed, or when the process dies), which PDFium reads as it needs: the worker's
    # memory does not grow with the file, only with the page at hand.
    with tempfile.TemporaryFile(prefix="docpipe-document-") as file:
        documents.copy_original(db, tenant_id, document_id, file)
        file.seek(0)
        reader = open_reader(fmt, file, settings)
        try:
            pages = _read_pages(db, settings, doc, reader, started)
        finally:
            reader.close()
    return _record(db, doc, fmt, pages)


def open_reader(fmt: DocumentFormat, source: bytes | BinaryIO, settings: Settings) -> _Reader:
    """The reader of a PDF or DOCX (its bytes, or its file: PDFium reads a PDF's as it needs
    it), with the bounds the settings give (what the step uses; tests and benchmarks read
    files through it too)."""
    limits = PageLimits.of(settings)
    if fmt is DocumentFormat.PDF:
        if isinstance(source, bytes):
            require_format(source[:_HEAD_BYTES], fmt)
        else:
            require_format(source.read(_HEAD_BYTES), fmt)
            source.seek(0)
        return PdfReader(source, limits)
    data = source if isinstance(source, bytes) else source.read()  # read whole, within bounds
    require_format(data, fmt)
    bounds = ZipBounds(settings.docx_max_expanded_bytes, settings.docx_max_expansion_ratio)
    return DocxReader(data, limits, bounds)


def _read_pages(
    db: Database, settings: Settings, doc: _Document, reader: _Reader, started: float
) -> list[FinishedPage]:
    finished = {p.page: p for p in documents.finished_pages(db, doc.tenant_id,
                                                            doc.document_id)}  # fmt: skip
    # Start no page that might not end (its OCR limit) before the soft limit interrupts it.
    budget_s = settings.task_soft_time_limit_s - settings.ocr_page_timeout - _FINISHING_S
    read_here = 0
    for index in range(reader.page_count):
        if index in finished:
            continue
        if read_here and time.monotonic() - started > budget_s:
            raise ExtractionContinues(
                f"{len(finished)} of {reader.page_count} pages read; the rest continue"
            )
        attempt = documents.start_page(db, doc.tenant_id, doc.document_id, index)
        if attempt is None:
            continue  # another run of this document read it meanwhile
        page = _with_no_text_warning(reader.read_page(index))
        warnings = [w.as_json() for w in page.warnings]
        documents.finish_page(db, doc.tenant_id, doc.document_id, index, text=page.text,
                              ocr=page.ocr, confidence=page.confidence, warnings=warnings,
                              rotation=page.rotation, text_layer_score=page.text_layer_score,
                              geometry=None if page.geometry is None else page.geometry.as_json(),
                              seconds=page.seconds)  # fmt: skip
        log.info("document %s page %d/%d read (%s, attempt %d, %.2fs)", doc.document_id,
                 index + 1, reader.page_count, "ocr" if page.ocr else "text", attempt,
                 page.seconds)  # fmt: skip
        finished[index] = FinishedPage(index, page.text, page.ocr, page.confidence, warnings,
                                       page.rotation)  # fmt: skip
        read_here += 1
    return [finished[i] for i in range(reader.page_count)]


def _with_no_text_warning(page: PageText) -> PageText:
    """The page, with a no_text warning when it gave no text (and no other warning says
    why: an OCR out of time)."""
    if page.text.strip() or any(w.kind == "ocr_timeout" for w in page.warnings):
        return page
    number = page.index + 1
    empty = PageWarning("no_text", number, None, f"page {number} gave no text")
    return replace(page, warnings=(*page.warnings, empty))


def _record(
    db: Database, doc: _Document, fmt: DocumentFormat, pages: list[FinishedPage]
) -> dict[str, Any]:
    text, starts = join_pages([p.text for p in pages])
    if not text.strip():
        raise UnreadableDocumentError(
            f"none of its {len(pages)} pages gave any text", kind="empty_text"
        )
    warnings = [w for p in pages for w in p.warnings]
    ocr_pages = sum(p.ocr for p in pages)
    documents.record_extraction(db, doc.tenant_id, doc.document_id, content=text,
                                page_starts=starts, ocr_pages=ocr_pages,
                                warnings=warnings)  # fmt: skip
    confidences = [p.confidence for p in pages if p.confidence is not None]
    rotated = [{"page": p.page + 1, "degrees": p.rotation} for p in pages if p.rotation]
    return _summary(fmt, text, list(starts), warnings, ocr_pages, confidences, rotated)


def _summary(
    fmt: str,
    text: str,
    page_starts: list[int],
    warnings: list[Any],
    ocr_pages: int,
    confidences: list[float],
    rotated_pages: list[Any],
) -> dict[str, Any]:
    return {
        "format": str(fmt),
        "pages": len(page_starts),
        "ocr_pages": ocr_pages,
        "characters": len(text),
        "ocr_confidence": round(sum(confidences) / len(confidences), 1) if confidences else None,
        "warnings": warnings,
        "rotated_pages": rotated_pages,
    }
