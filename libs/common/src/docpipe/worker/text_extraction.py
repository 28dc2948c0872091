"""The ``extract_text`` step as the worker runs it: the document's pages read one by one,
each memoised in PostgreSQL before the next starts, then the text and page map written
onto the document once.

A worker process reads at most DOCPIPE_WORKER_PAGE_READS pages at once: in a threads pool
hundreds of steps share one process, and each page read is a core's work in a process
beside it (Tesseract, PDFium). A step that gets no turn within its time hands itself back
as a long scan does.

A worker killed on page 31 of a 40-page scan leaves pages 1-30 on record; the next attempt
reads page 31 again (``document_page.attempts`` = 2) and goes on. A long scan does not need
a long time limit either: once the time left in the task could not fit another page, the
step hands itself back (:class:`ExtractionContinues`, which uses up no attempt) and the
next delivery continues where it stopped. A page must also end within the step's time,
its text layer, rendering and OCR together (each has its own limit, and their sum may pass
the soft limit): the first page of a delivery that cannot fails ``too_slow``, at no
provider cost and without the soft limit's retries; a later one is handed back to be the
next delivery's first.

What a document expands into is bounded while it is read: each page's characters and the
document's (DOCPIPE_MAX_PAGE_CHARS, DOCPIPE_MAX_DOCUMENT_CHARS: ``too_much_text``), and a
Word file, read whole when it is opened, must be read within the step's time
(``too_slow``), once per delivery.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, BinaryIO, NoReturn, Protocol

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.formats import IMAGE_FORMATS, DocumentFormat, require_format
from docpipe.extraction.images import ImageReader
from docpipe.extraction.limits import too_much_text, too_slow
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
# How often a step waiting for a turn to read a page looks up (a time limit's interruption
# lands between two looks).
_TURN_POLL_S = 0.5


class ExtractionContinues(Exception):
    """The pages read so far are on record; the rest wait for the step's next delivery."""


class _Reader(Protocol):
    page_count: int

    def read_page(self, index: int, *, deadline: float | None = None) -> PageText: ...

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
        # Opening (a Word file is read whole then) and each page end in the step's time.
        deadline = started + settings.task_soft_time_limit_s - _FINISHING_S
        reader = open_reader(fmt, file, settings, deadline=deadline)
        try:
            pages = _read_pages(db, settings, doc, reader, started, deadline)
        finally:
            reader.close()
    return _record(db, doc, fmt, pages)


def open_reader(
    fmt: DocumentFormat,
    source: bytes | BinaryIO,
    settings: Settings,
    *,
    deadline: float | None = None,
) -> _Reader:
    """The reader of a PDF, an image or a DOCX (its bytes, or its file: PDFium reads a PDF's
    as it needs it, PIL an image's), with the bounds the settings give (what the step uses;
    tests and benchmarks read files through it too). ``deadline`` (time.monotonic()): when
    opening it must have ended (a Word file is read whole then)."""
    limits = PageLimits.of(settings)
    if fmt is DocumentFormat.PDF or fmt in IMAGE_FORMATS:
        if isinstance(source, bytes):
            require_format(source[:_HEAD_BYTES], fmt)
        else:
            require_format(source.read(_HEAD_BYTES), fmt)
            source.seek(0)
        if fmt is DocumentFormat.PDF:
            return PdfReader(source, limits, deadline=deadline)
        return ImageReader(source, fmt, limits)
    data = source if isinstance(source, bytes) else source.read()  # read whole, within bounds
    require_format(data, fmt)
    bounds = ZipBounds(settings.docx_max_expanded_bytes, settings.docx_max_expansion_ratio)
    return DocxReader(data, limits, bounds, deadline=deadline)


def _read_pages(
    db: Database,
    settings: Settings,
    doc: _Document,
    reader: _Reader,
    started: float,
    deadline: float,
) -> list[FinishedPage]:
    finished = {p.page: p for p in documents.finished_pages(db, doc.tenant_id, doc.document_id)}
    # Start no page that might not end (its OCR limit) before the soft limit interrupts it.
    budget_s = settings.task_soft_time_limit_s - settings.ocr_page_timeout - _FINISHING_S
    read_here = 0
    chars = sum(len(p.text) for p in finished.values())
    _check_document_chars(chars, settings.max_document_chars)
    for index in range(reader.page_count):
        if index in finished:
            continue
        if read_here and time.monotonic() - started > budget_s:
            raise ExtractionContinues(
                f"{len(finished)} of {reader.page_count} pages read; the rest continue"
            )
        with _page_turn(settings.worker_page_reads, started + budget_s) as turn:
            if not turn:
                raise ExtractionContinues(
                    f"{len(finished)} of {reader.page_count} pages read; no turn to read "
                    f"the next within the step's time (DOCPIPE_WORKER_PAGE_READS="
                    f"{settings.worker_page_reads})"
                )
            attempt = documents.start_page(db, doc.tenant_id, doc.document_id, index)
            if attempt is None:
                continue  # another run of this document read it meanwhile
            try:
                page = _with_no_text_warning(reader.read_page(index, deadline=deadline))
            except UnreadableDocumentError as exc:
                documents.forget_page(db, doc.tenant_id, doc.document_id, index)
                if exc.kind == "too_slow" and time.monotonic() >= deadline:
                    _out_of_step_time(settings, reader, index, len(finished), read_here)
                raise
        warnings = [w.as_json() for w in page.warnings]
        documents.finish_page(
            db,
            doc.tenant_id,
            doc.document_id,
            index,
            text=page.text,
            ocr=page.ocr,
            confidence=page.confidence,
            warnings=warnings,
            rotation=page.rotation,
            text_layer_score=page.text_layer_score,
            geometry=None if page.geometry is None else page.geometry.as_json(),
            seconds=page.seconds,
        )
        log.info(
            "document %s page %d/%d read (%s, attempt %d, %.2fs)",
            doc.document_id,
            index + 1,
            reader.page_count,
            "ocr" if page.ocr else "text",
            attempt,
            page.seconds,
        )
        finished[index] = FinishedPage(
            index, page.text, page.ocr, page.confidence, warnings, page.rotation
        )
        read_here += 1
        chars += len(page.text)
        _check_document_chars(chars, settings.max_document_chars)
    return [finished[i] for i in range(reader.page_count)]


_turns: threading.BoundedSemaphore | None = None
_turns_size = 0
_turns_lock = threading.Lock()


@contextmanager
def _page_turn(size: int, until: float) -> Iterator[bool]:
    """One of this process' ``size`` turns to read a page, held for the block (True), or
    False once ``until`` (time.monotonic()) has passed without one."""
    global _turns, _turns_size
    with _turns_lock:
        if _turns is None or _turns_size != size:
            _turns, _turns_size = threading.BoundedSemaphore(size), size
        turns = _turns
    while not turns.acquire(timeout=max(0.0, min(_TURN_POLL_S, until - time.monotonic()))):
        if time.monotonic() >= until:
            yield False
            return
    try:
        yield True
    finally:
        turns.release()


def _out_of_step_time(
    settings: Settings, reader: _Reader, index: int, finished: int, read_here: int
) -> NoReturn:
    """Page ``index`` ran into the step's deadline: handed back when pages were read
    before it in this delivery (the next starts with it, with the step's whole time);
    too_slow when it had that time and still could not end."""
    if read_here:
        raise ExtractionContinues(
            f"{finished} of {reader.page_count} pages read; the rest continue (page "
            f"{index + 1} did not fit in the step's time left)"
        ) from None
    raise too_slow(
        f"page {index + 1} could not be read within one step's time: its text layer, "
        "rendering and OCR together take longer than DOCPIPE_TASK_SOFT_TIME_LIMIT_S="
        f"{settings.task_soft_time_limit_s:g} s allows"
    ) from None


def _check_document_chars(chars: int, limit: int) -> None:
    if chars > limit:
        raise too_much_text(
            f"the document's pages hold more than {limit} characters (DOCPIPE_MAX_DOCUMENT_CHARS)"
        )


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
    documents.record_extraction(
        db,
        doc.tenant_id,
        doc.document_id,
        content=text,
        page_starts=starts,
        ocr_pages=ocr_pages,
        warnings=warnings,
    )
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
