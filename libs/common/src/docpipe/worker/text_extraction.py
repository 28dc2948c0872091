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
import time
from dataclasses import dataclass
from typing import Any, Protocol

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.formats import DocumentFormat, require_format
from docpipe.extraction.pages import PageLimits, PageText, join_pages
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
    if source.extracted:  # a text document (its emptiness is extract_sections' to judge)
        return _summary(source.format, source.content, source.page_starts, source.warnings,
                        source.ocr_pages, confidences=[])  # fmt: skip
    fmt = DocumentFormat(source.format)
    assert source.original is not None, "a PDF or DOCX keeps its bytes"
    require_format(source.original, fmt)
    doc = _Document(tenant_id, document_id)
    reader = open_reader(fmt, source.original, settings)
    try:
        pages = _read_pages(db, settings, doc, reader, started)
    finally:
        reader.close()
    return _record(db, doc, fmt, pages)


def open_reader(fmt: DocumentFormat, data: bytes, settings: Settings) -> _Reader:
    """The reader of a PDF or DOCX, with the bounds the settings give (what the step uses;
    tests and benchmarks read files through it too)."""
    limits = PageLimits.of(settings)
    if fmt is DocumentFormat.PDF:
        return PdfReader(data, limits)
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
        page = reader.read_page(index)
        documents.finish_page(db, doc.tenant_id, doc.document_id, index, text=page.text,
                              ocr=page.ocr, confidence=page.confidence,
                              warning=page.warning, seconds=page.seconds)  # fmt: skip
        log.info("document %s page %d/%d read (%s, attempt %d, %.2fs)", doc.document_id,
                 index + 1, reader.page_count, "ocr" if page.ocr else "text", attempt,
                 page.seconds)  # fmt: skip
        finished[index] = FinishedPage(index, page.text, page.ocr, page.confidence,
                                       page.warning)  # fmt: skip
        read_here += 1
    return [finished[i] for i in range(reader.page_count)]


def _record(
    db: Database, doc: _Document, fmt: DocumentFormat, pages: list[FinishedPage]
) -> dict[str, Any]:
    text, starts = join_pages([p.text for p in pages])
    if not text.strip():
        raise UnreadableDocumentError(
            f"none of its {len(pages)} pages gave any text", kind="empty_text"
        )
    warnings = [p.warning for p in pages if p.warning]
    ocr_pages = sum(p.ocr for p in pages)
    documents.record_extraction(db, doc.tenant_id, doc.document_id, content=text,
                                page_starts=starts, ocr_pages=ocr_pages,
                                warnings=warnings)  # fmt: skip
    confidences = [p.confidence for p in pages if p.confidence is not None]
    return _summary(fmt, text, list(starts), warnings, ocr_pages, confidences)


def _summary(
    fmt: str,
    text: str,
    page_starts: list[int],
    warnings: list[Any],
    ocr_pages: int,
    confidences: list[float],
) -> dict[str, Any]:
    return {
        "format": str(fmt),
        "pages": len(page_starts),
        "ocr_pages": ocr_pages,
        "characters": len(text),
        "ocr_confidence": round(sum(confidences) / len(confidences), 1) if confidences else None,
        "warnings": [str(w) for w in warnings],
    }
