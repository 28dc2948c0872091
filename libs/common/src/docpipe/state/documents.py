"""Documents: stored once per (tenant, id) and never changed, so a run always reads the text
it was started on; deleted on request or by retention, never while a run uses them. A PDF
or DOCX keeps its uploaded bytes; its text and page map are written once, by the first
run's ``extract_text`` step.

A file's bytes are stored in chunks (``document_original_chunk``) as the upload is read from
disk, so storing a 50 MB scan costs a process one chunk of memory, not 50 MB.

That step's memo is kept per document and page, like the call log is for provider calls: a
page is put on record before it is read and completed after, so a retried extraction reads
only the pages that had not finished (``attempts`` shows what was read twice), and the text
with its page map is written onto the document once, when every page is read."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import IO, Any, BinaryIO

from psycopg.types.json import Jsonb

from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe.state.db import Database, Session

__all__ = [
    "DOCUMENT_ID",
    "ORIGINAL_CHUNK_BYTES",
    "DocumentSource",
    "DocumentText",
    "FinishedPage",
    "StoredDocument",
    "copy_original",
    "delete_document",
    "document_for_extraction",
    "document_text",
    "finish_page",
    "finished_pages",
    "forget_page",
    "get_document",
    "put_document",
    "put_file",
    "record_extraction",
    "start_page",
]

# A file is stored (and read back) in chunks of this size: what a process holds of it at once.
ORIGINAL_CHUNK_BYTES = 1 << 20

# \Z, not $: "$" also matches before a final newline, and an id ending in one would be
# stored and then break the Location header that names it.
DOCUMENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")


@dataclass(frozen=True)
class StoredDocument:
    id: str
    sha256: str
    size_bytes: int
    created_at: datetime
    created: bool
    format: str
    extracted: bool  # its text is known (always, for text)
    pages: int | None  # None until extracted
    ocr_pages: int | None
    warnings: list[Any] | None
    # The pages turned to be read upright: {"page": 1-based, "degrees": clockwise}.
    rotated_pages: list[Any] | None

    @property
    def ocr(self) -> bool | None:
        """Whether any page needed OCR; None until extracted."""
        return None if self.ocr_pages is None else self.ocr_pages > 0


def put_document(
    session: Session, tenant_id: str, document_id: str, content: str
) -> StoredDocument:
    """Store a text document; storing the same text again is a no-op, other text is a
    conflict."""
    if "\x00" in content:
        raise InvalidRequestError("document text must not contain NUL characters")
    data = content.encode("utf-8")
    return _put(
        session,
        tenant_id,
        document_id,
        hashlib.sha256(data).hexdigest(),
        len(data),
        content=content,
        fmt="text",
    )


def put_file(
    session: Session, tenant_id: str, document_id: str, file: IO[bytes], fmt: str
) -> StoredDocument:
    """Store a PDF or DOCX (``fmt``, as its bytes say) read from ``file`` (from its start),
    ORIGINAL_CHUNK_BYTES at a time: its hash first, then its bytes, one chunk per
    statement, in the caller's transaction. The same bytes again are a no-op (nothing
    written), other bytes a conflict. Its text comes later."""
    file.seek(0)
    digest, size = hashlib.sha256(), 0
    for chunk in iter(lambda: file.read(ORIGINAL_CHUNK_BYTES), b""):
        digest.update(chunk)
        size += len(chunk)
    stored = _put(session, tenant_id, document_id, digest.hexdigest(), size, content="", fmt=fmt)
    if stored.created:
        file.seek(0)
        for seq, chunk in enumerate(iter(lambda: file.read(ORIGINAL_CHUNK_BYTES), b"")):
            session.execute(
                "put_original_chunk",
                tenant_id=tenant_id,
                document_id=document_id,
                seq=seq,
                data=chunk,
            )
    return stored


def _put(
    session: Session,
    tenant_id: str,
    document_id: str,
    sha256: str,
    size_bytes: int,
    *,
    content: str,
    fmt: str,
) -> StoredDocument:
    if not DOCUMENT_ID.match(document_id):
        raise InvalidRequestError(
            f"document id {document_id[:140]!r} must be 1-128 characters of letters, digits and "
            "'._:-', starting with a letter or digit"
        )
    row = session.insert_or_existing(
        "put_document",
        tenant_id=tenant_id,
        id=document_id,
        content=content,
        sha256=sha256,
        size_bytes=size_bytes,
        format=fmt,
    )
    if row["sha256"] != sha256:
        raise ConflictError(
            f"document {document_id!r} already exists with different content; documents are "
            "immutable, store the new content under a new id"
        )
    return replace(get_document(session, tenant_id, document_id), created=bool(row["created"]))


def get_document(session: Session, tenant_id: str, document_id: str) -> StoredDocument:
    """The stored document's metadata; NotFoundError for ids this tenant never stored."""
    stored = None
    # A malformed id cannot exist (and a NUL in it would be a database error, not a 404).
    if DOCUMENT_ID.match(document_id):
        stored = session.one_as(StoredDocument, "get_document", tenant_id=tenant_id, id=document_id)
    if stored is None:
        raise NotFoundError(f"document {document_id[:140]!r} does not exist")
    return stored


_NAMED_RUNS = 3


def delete_document(session: Session, tenant_id: str, document_id: str) -> None:
    """Delete the document and its ended runs (their outputs are its content in another
    form), in the caller's transaction. NotFoundError for ids this tenant never stored;
    ConflictError, naming them, while runs that use it have not ended."""
    # The lock first, then a fresh look at the runs: a run started meanwhile is either
    # committed (and seen here) or waits for the lock and then fails its foreign key, which
    # create_run and create_batch answer with a 404.
    locked = DOCUMENT_ID.match(document_id) and session.one(
        "lock_document", tenant_id=tenant_id, id=document_id
    )
    if not locked:
        raise NotFoundError(f"document {document_id[:140]!r} does not exist")
    active = session.all(
        "document_active_runs", tenant_id=tenant_id, id=document_id, limit=_NAMED_RUNS + 1
    )
    if active:
        named = ", ".join(r["id"] for r in active[:_NAMED_RUNS])
        more = " and more" if len(active) > _NAMED_RUNS else ""
        raise ConflictError(
            f"document {document_id!r} is used by runs that have not ended: {named}{more}; "
            "cancel them or wait until they end, then delete it"
        )
    session.execute("delete_document_runs", tenant_id=tenant_id, id=document_id)
    session.execute("delete_document", tenant_id=tenant_id, id=document_id)


# Text extraction: the memo per page, and the text written once.


@dataclass(frozen=True)
class DocumentSource:
    format: str
    # The extract_text step's output once the text is known (SQL known_text_summary)
    known_summary: dict[str, Any] | None


@dataclass(frozen=True)
class FinishedPage:
    page: int
    text: str
    ocr: bool
    confidence: float | None
    warnings: list[dict[str, Any]]  # docpipe.extraction.pages.PageWarning as JSON
    rotation: int


def document_for_extraction(db: Database, tenant_id: str, document_id: str) -> DocumentSource:
    """What the extract_text step reads of the document (a file's bytes: copy_original)."""
    found = db.one_as(
        DocumentSource, "document_for_extraction", tenant_id=tenant_id, id=document_id
    )
    if found is None:
        raise NotFoundError(f"document {document_id!r} does not exist")
    return found


def copy_original(db: Database, tenant_id: str, document_id: str, file: BinaryIO) -> int:
    """Write the document's uploaded bytes into ``file`` a chunk at a time (one per query),
    so that its size never shows in a process' memory; the bytes written. A file stored
    before migration 0020 (whole, in document.original) is read in slices of a chunk."""
    written = seq = 0
    while (
        row := db.one("original_chunk", tenant_id=tenant_id, document_id=document_id, seq=seq)
    ) is not None:
        file.write(row["data"])
        written, seq = written + len(row["data"]), seq + 1
    while seq == 0:
        row = db.one(
            "original_slice",
            tenant_id=tenant_id,
            id=document_id,
            start=written + 1,
            length=ORIGINAL_CHUNK_BYTES,
        )
        data = bytes(row["bytes"]) if row is not None and row["bytes"] is not None else b""
        file.write(data)
        written += len(data)
        if len(data) < ORIGINAL_CHUNK_BYTES:
            break
    return written


def start_page(db: Database, tenant_id: str, document_id: str, page: int) -> int | None:
    """Put the page on record as being read; its attempt number, or None when it was
    already read (by another run of the same document meanwhile)."""
    row = db.one("start_page", tenant_id=tenant_id, document_id=document_id, page=page)
    return None if row is None else int(row["attempts"])


def forget_page(db: Database, tenant_id: str, document_id: str, page: int) -> None:
    """Take a started page that cannot be read off record."""
    db.execute("forget_page", tenant_id=tenant_id, document_id=document_id, page=page)


def finish_page(
    db: Database,
    tenant_id: str,
    document_id: str,
    page: int,
    *,
    text: str,
    ocr: bool,
    confidence: float | None,
    warnings: list[dict[str, Any]],
    rotation: int,
    text_layer_score: float | None,
    geometry: dict[str, Any] | None,
    seconds: float,
) -> None:
    db.execute(
        "finish_page",
        tenant_id=tenant_id,
        document_id=document_id,
        page=page,
        text=text,
        ocr=ocr,
        confidence=confidence,
        warnings=Jsonb(warnings),
        rotation=rotation,
        text_layer_score=text_layer_score,
        geometry=None if geometry is None else Jsonb(geometry),
        seconds=seconds,
    )


def finished_pages(db: Database, tenant_id: str, document_id: str) -> list[FinishedPage]:
    return db.all_as(FinishedPage, "finished_pages", tenant_id=tenant_id, document_id=document_id)


def record_extraction(
    db: Database,
    tenant_id: str,
    document_id: str,
    *,
    content: str,
    page_starts: tuple[int, ...],
    ocr_pages: int,
    warnings: list[dict[str, Any]],
) -> None:
    """Write the text and page map onto the document, unless a concurrent run already did
    (from the same pages, so the same text)."""
    db.execute(
        "record_extraction",
        tenant_id=tenant_id,
        id=document_id,
        content=content,
        page_starts=list(page_starts),
        ocr_pages=ocr_pages,
        warnings=Jsonb(warnings),
    )


@dataclass(frozen=True)
class DocumentText:
    """The text that evidence offsets refer to, with the offset where each page starts."""

    format: str
    text: str
    page_starts: list[int]

    def page(self, number: int) -> tuple[int, str]:
        """(start offset, text) of the 1-based page ``number``."""
        if not 1 <= number <= len(self.page_starts):
            raise NotFoundError(
                f"page {number} does not exist: the document has {len(self.page_starts)} "
                f"page{'s' if len(self.page_starts) != 1 else ''}"
            )
        start = self.page_starts[number - 1]
        end = self.page_starts[number] if number < len(self.page_starts) else len(self.text)
        return start, self.text[start:end]


def document_text(db: Database, tenant_id: str, document_id: str) -> DocumentText:
    """The document's text; NotFoundError for ids this tenant never stored, ConflictError
    while a PDF's or DOCX's text is not yet extracted (its first run's first step does it)."""
    row = None
    if DOCUMENT_ID.match(document_id):
        row = db.one("document_text", tenant_id=tenant_id, id=document_id)
    if row is None:
        raise NotFoundError(f"document {document_id[:140]!r} does not exist")
    if not row["extracted"]:
        raise ConflictError(
            f"document {document_id!r} is a {row['format'].upper()} whose text is not extracted "
            "yet: its first run's extract_text step reads it"
        )
    return DocumentText(row["format"], row["content"], list(row["page_starts"]))
