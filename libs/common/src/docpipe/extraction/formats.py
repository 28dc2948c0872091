"""A file's format from its bytes (never from the client's Content-Type), and the checks
cheap enough to run at upload: the magic number, and for a DOCX the zip's central directory
(which parts it has, what sizes it declares), read without decompressing anything."""

from __future__ import annotations

import io
import zipfile
from enum import StrEnum
from typing import IO

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.zipguard import ZipBounds, check_declared_sizes

__all__ = ["UNREADABLE_KINDS", "DocumentFormat", "check_upload", "format_of_head", "sniff_format"]

# Why a file cannot give text; each is permanent (the same bytes fail the same way).
UNREADABLE_KINDS = (
    "encrypted",  # a PDF that needs a password to open
    "corrupt",  # damaged or truncated
    "format_mismatch",  # its bytes claim a format its content is not
    "too_many_pages",  # more pages than DOCPIPE_MAX_DOCUMENT_PAGES
    "decompression_bomb",  # a DOCX whose zip expands past its bounds
    "too_complex",  # a DOCX with more text boxes or deeper nesting than a Word file has
    "empty_text",  # no page gave any text
)

_PDF_MAGIC = b"%PDF-"
# PDF readers accept the header within the first KiB (after a BOM or mail junk); so do we.
_PDF_HEADER_WINDOW = 1024
_ZIP_MAGIC = b"PK\x03\x04"
_DOCX_MAIN_PART = "word/document.xml"


class DocumentFormat(StrEnum):
    TEXT = "text"
    PDF = "pdf"
    DOCX = "docx"


def format_of_head(head: bytes) -> DocumentFormat | None:
    """What a file's first KiB says: PDF, DOCX for any zip (only its central directory, at
    the end, tells a Word file from another zip: :func:`sniff_format`), else None. Enough to
    pick the size limit an upload is held to while it arrives."""
    if _PDF_MAGIC in head[:_PDF_HEADER_WINDOW]:
        return DocumentFormat.PDF
    return DocumentFormat.DOCX if head.startswith(_ZIP_MAGIC) else None


def sniff_format(data: bytes | IO[bytes]) -> DocumentFormat | None:
    """PDF or DOCX when the bytes (or the seekable file, left where it was) say so; None
    otherwise (text is decided by the caller, which knows whether the client declared
    text). A zip is a DOCX only if its central directory lists the main document part:
    another zip (XLSX, a plain archive) is None."""
    file = _file_of(data)
    start = file.tell()
    head = file.read(_PDF_HEADER_WINDOW)
    file.seek(start)
    fmt = format_of_head(head)
    if fmt is not DocumentFormat.DOCX:
        return fmt
    try:
        with zipfile.ZipFile(file) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, ValueError, OSError):
        return None
    finally:
        file.seek(start)
    return DocumentFormat.DOCX if _DOCX_MAIN_PART in names else None


def check_upload(data: bytes | IO[bytes], fmt: DocumentFormat, bounds: ZipBounds) -> None:
    """Refuse at upload what is cheap to see: a DOCX whose central directory already
    declares a decompression bomb (UnreadableDocumentError). What the bytes only reveal
    when read (a zip lying about its sizes, an encrypted or damaged PDF) is the worker's."""
    if fmt is DocumentFormat.DOCX:
        file = _file_of(data)
        start = file.tell()
        size = file.seek(0, io.SEEK_END) - start
        file.seek(start)
        try:
            with zipfile.ZipFile(file) as archive:
                check_declared_sizes(archive, size, bounds)
        finally:
            file.seek(start)


def _file_of(data: bytes | IO[bytes]) -> IO[bytes]:
    return io.BytesIO(data) if isinstance(data, bytes | bytearray) else data


def require_format(data: bytes, claimed: DocumentFormat) -> None:
    """UnreadableDocumentError(format_mismatch) unless the bytes still sniff as ``claimed``."""
    if sniff_format(data) is not claimed:
        raise UnreadableDocumentError(
            f"the stored bytes are not a {claimed.upper()} file", kind="format_mismatch"
        )
