"""A file's format from its bytes (never from the client's Content-Type), and the checks
cheap enough to run at upload: the magic number, for a DOCX the zip's central directory
(which parts it has, what sizes it declares), for an image its header (how many pixels each
page decodes into), read without decompressing anything."""

from __future__ import annotations

import io
import zipfile
from enum import StrEnum
from typing import IO

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.images import PixelBounds, check_image
from docpipe.extraction.zipguard import ZipBounds, check_declared_sizes, check_directory

__all__ = [
    "ACCEPTED_FORMATS",
    "IMAGE_FORMATS",
    "UNREADABLE_KINDS",
    "DocumentFormat",
    "check_upload",
    "format_of_head",
    "sniff_format",
]

# Why a file cannot give text; each is permanent (the same bytes fail the same way).
UNREADABLE_KINDS = (
    "encrypted",  # a PDF that needs a password to open
    "corrupt",  # damaged or truncated
    "format_mismatch",  # its bytes claim a format its content is not
    "too_many_pages",  # more pages than DOCPIPE_MAX_DOCUMENT_PAGES
    "decompression_bomb",  # a DOCX whose zip, or an image whose pixels, expand past bounds
    "too_complex",  # a DOCX with more text boxes or deeper nesting than a Word file has
    "too_much_text",  # its text (repeats included) past DOCPIPE_MAX_DOCUMENT_CHARS or a page's
    "page_too_large",  # a page that fits DOCPIPE_MAX_PAGE_PIXELS only below a readable dpi
    "too_slow",  # its reading took longer than its step may take, or than a document may
    "ocr_failed",  # Tesseract failed on a page (its output is in the worker's log)
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
    PNG = "png"
    JPEG = "jpeg"
    TIFF = "tiff"


# Images are read as scans are: each page (a TIFF's each frame) by OCR.
IMAGE_FORMATS = frozenset({DocumentFormat.PNG, DocumentFormat.JPEG, DocumentFormat.TIFF})
# What people are told a document may be, in the order they are told it.
ACCEPTED_FORMATS = "PDF, Word (DOCX), PNG, JPEG or TIFF files, or UTF-8 text"
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", DocumentFormat.PNG),
    (b"\xff\xd8\xff", DocumentFormat.JPEG),
    (b"II*\x00", DocumentFormat.TIFF),  # little-endian
    (b"MM\x00*", DocumentFormat.TIFF),  # big-endian
)


def format_of_head(head: bytes) -> DocumentFormat | None:
    """What a file's first KiB says: PDF, an image by its magic number, DOCX for any zip
    (only its central directory, at the end, tells a Word file from another zip:
    :func:`sniff_format`), else None. Enough to pick the size limit an upload is held to
    while it arrives."""
    if _PDF_MAGIC in head[:_PDF_HEADER_WINDOW]:
        return DocumentFormat.PDF
    for magic, fmt in _IMAGE_MAGIC:
        if head.startswith(magic):
            return fmt
    return DocumentFormat.DOCX if head.startswith(_ZIP_MAGIC) else None


def sniff_format(data: bytes | IO[bytes]) -> DocumentFormat | None:
    """PDF, DOCX or an image when the bytes (or the seekable file, left where it was) say
    so; None otherwise (text is decided by the caller, which knows whether the client
    declared text). A zip is a DOCX only if its central directory lists the main document
    part: another zip (XLSX, a plain archive) is None. A zip whose end record declares more
    members than a Word file has is UnreadableDocumentError (decompression_bomb) before
    its directory is read."""
    file = _file_of(data)
    start = file.tell()
    head = file.read(_PDF_HEADER_WINDOW)
    file.seek(start)
    fmt = format_of_head(head)
    if fmt is not DocumentFormat.DOCX:
        return fmt
    check_directory(file)
    try:
        with zipfile.ZipFile(file) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, ValueError, OSError):
        return None
    finally:
        file.seek(start)
    return DocumentFormat.DOCX if _DOCX_MAIN_PART in names else None


def check_upload(
    data: bytes | IO[bytes], fmt: DocumentFormat, bounds: ZipBounds, pixels: PixelBounds
) -> None:
    """Refuse at upload what is cheap to see (UnreadableDocumentError): a DOCX whose central
    directory already declares a decompression bomb; an image whose header is not one, or
    that has more pages than allowed, or a page of more pixels than may be decoded
    (docpipe.extraction.images). What the bytes only reveal when read (a zip lying about its
    sizes, an encrypted or damaged PDF, an image's damaged pixels) is the worker's."""
    if fmt in IMAGE_FORMATS:
        check_image(_file_of(data), fmt, pixels)
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
