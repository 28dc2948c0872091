"""Documents as people have them: plain text, PDF (with or without a text layer) and DOCX.

:mod:`formats` tells a file's format from its bytes, cheaply enough for the API to refuse
what it can at upload. The readers give text page by page, each bounded (pages, pixels per
rendered page, decompressed bytes, OCR time, text boxes and nesting): :mod:`pdf`
(pypdfium2; pages without a text layer are rendered and read by Tesseract, :mod:`ocr`) and
:mod:`docx_reader` (the Word file's XML, :mod:`word`, after :mod:`zipguard` checked the
archive). A file that cannot give text raises :class:`~docpipe.errors.UnreadableDocumentError`
with one of :data:`UNREADABLE_KINDS`.

The worker's ``extract_text`` step (docpipe.worker.text_extraction) drives them and
memoises each page in PostgreSQL. Imports the foundation only (settings, errors).
"""

from docpipe.extraction.formats import (
    UNREADABLE_KINDS,
    DocumentFormat,
    check_upload,
    format_of_head,
    sniff_format,
)

__all__ = ["UNREADABLE_KINDS", "DocumentFormat", "check_upload", "format_of_head", "sniff_format"]
