"""Text extraction's memo, per document and page, like the call log is for provider calls:
a page is put on record before it is read and completed after, so a retried extraction
reads only the pages that had not finished (``attempts`` shows what was read twice), and
the text with its page map is written onto the document once, when every page is read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from docpipe.errors import NotFoundError
from docpipe.state.db import Database

__all__ = [
    "DocumentSource",
    "FinishedPage",
    "document_for_extraction",
    "finish_page",
    "finished_pages",
    "record_extraction",
    "start_page",
]


@dataclass(frozen=True)
class DocumentSource:
    format: str
    original: bytes | None
    content: str
    extracted: bool
    page_starts: list[int]
    ocr_pages: int
    warnings: list[Any]


@dataclass(frozen=True)
class FinishedPage:
    page: int
    text: str
    ocr: bool
    confidence: float | None
    warning: str | None


def document_for_extraction(db: Database, tenant_id: str, document_id: str) -> DocumentSource:
    found = db.one_as(DocumentSource, "document_for_extraction", tenant_id=tenant_id,
                      id=document_id)  # fmt: skip
    if found is None:
        raise NotFoundError(f"document {document_id!r} does not exist")
    return found


def start_page(db: Database, tenant_id: str, document_id: str, page: int) -> int | None:
    """Put the page on record as being read; its attempt number, or None when it was
    already read (by another run of the same document meanwhile)."""
    row = db.one("start_page", tenant_id=tenant_id, document_id=document_id, page=page)
    return None if row is None else int(row["attempts"])


def finish_page(
    db: Database,
    tenant_id: str,
    document_id: str,
    page: int,
    *,
    text: str,
    ocr: bool,
    confidence: float | None,
    warning: str | None,
    seconds: float,
) -> None:
    db.execute("finish_page", tenant_id=tenant_id, document_id=document_id, page=page,
               text=text, ocr=ocr, confidence=confidence, warning=warning,
               seconds=seconds)  # fmt: skip


def finished_pages(db: Database, tenant_id: str, document_id: str) -> list[FinishedPage]:
    return db.all_as(FinishedPage, "finished_pages", tenant_id=tenant_id,
                     document_id=document_id)  # fmt: skip


def record_extraction(
    db: Database,
    tenant_id: str,
    document_id: str,
    *,
    content: str,
    page_starts: tuple[int, ...],
    ocr_pages: int,
    warnings: list[str],
) -> None:
    """Write the text and page map onto the document, unless a concurrent run already did
    (from the same pages, so the same text)."""
    db.execute("record_extraction", tenant_id=tenant_id, id=document_id, content=content,
               page_starts=list(page_starts), ocr_pages=ocr_pages,
               warnings=Jsonb(warnings))  # fmt: skip
