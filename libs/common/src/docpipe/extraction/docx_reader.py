"""DOCX through python-docx: paragraphs (headings included) and tables in document order,
split into pages at explicit page breaks (Word lays pages out itself; a DOCX stores no
other page boundary). The zip is checked against its bounds before python-docx opens it."""

from __future__ import annotations

import io
import time
import zipfile

import docx
from docx.opc.exceptions import PackageNotFoundError
from docx.table import Table
from docx.text.paragraph import Paragraph

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.pages import PageLimits, PageText
from docpipe.extraction.zipguard import ZipBounds, check_actual_sizes

__all__ = ["DocxReader"]

_PAGE_BREAK = './/w:br[@w:type="page"]'


class DocxReader:
    """An opened DOCX: its pages' text, read at once (no OCR, so nothing to memoise per page
    beyond what the driver does for every format)."""

    def __init__(self, data: bytes, limits: PageLimits, bounds: ZipBounds) -> None:
        started = time.monotonic()
        check_actual_sizes(data, bounds)
        try:
            document = docx.Document(io.BytesIO(data))
        except ValueError as exc:  # python-docx: "... is not a Word file, content type is"
            raise UnreadableDocumentError(
                f"the zip is not a Word document ({exc})", kind="format_mismatch"
            ) from None
        # lxml's XMLSyntaxError is a SyntaxError.
        except (PackageNotFoundError, KeyError, zipfile.BadZipFile, SyntaxError) as exc:
            raise UnreadableDocumentError(f"the DOCX is damaged ({exc})", kind="corrupt") from None
        self._pages = _pages_of(document, limits)
        self.page_count = len(self._pages)
        self._seconds = (time.monotonic() - started) / max(self.page_count, 1)

    def close(self) -> None:
        self._pages = []

    def read_page(self, index: int) -> PageText:
        return PageText(index, self._pages[index], ocr=False, seconds=self._seconds)


def _pages_of(document: docx.document.Document, limits: PageLimits) -> list[str]:
    pages: list[list[str]] = [[]]
    for block in document.iter_inner_content():
        text = _text_of(block)
        if text:
            pages[-1].append(text)
        if isinstance(block, Paragraph) and block._p.xpath(_PAGE_BREAK):
            pages.append([])
            limits.check_page_count(len(pages))
    if len(pages) > 1 and not pages[-1]:
        pages.pop()  # a break at the very end starts no page
    return ["\n\n".join(blocks) for blocks in pages]


def _text_of(block: Paragraph | Table) -> str:
    if isinstance(block, Paragraph):
        return block.text.strip()
    return "\n".join(_row_text(row) for row in block.rows).strip()


def _row_text(row: object) -> str:
    cells: list[str] = []
    for cell in getattr(row, "cells", ()):
        text = " ".join(cell.text.split())
        if not cells or cells[-1] != text:  # a merged cell repeats in every grid column
            cells.append(text)
    return " | ".join(cells)
