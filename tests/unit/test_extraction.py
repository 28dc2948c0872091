"""Format detection, zip bounds and page maps, without a worker (tests/integration/
test_document_formats.py runs them through real workers and Tesseract)."""

from __future__ import annotations

import io

import docx
import pytest

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction import DocumentFormat, check_upload, sniff_format
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.pages import PageLimits, join_pages
from docpipe.extraction.zipguard import ZipBounds, check_actual_sizes
from docpipe.settings import Settings
from tests import document_files as files

BOUNDS = ZipBounds(max_bytes=100_000_000, max_ratio=100)


def test_the_format_comes_from_the_bytes() -> None:
    assert sniff_format(files.contract_as("pdf", "1. TERM\n\nTwelve months.")) is DocumentFormat.PDF
    assert sniff_format(files.contract_as("docx", "1. TERM")) is DocumentFormat.DOCX
    assert sniff_format(b"\xef\xbb\xbf%PDF-1.4 after a BOM") is DocumentFormat.PDF
    assert sniff_format(files.not_a_docx_zip()) is None
    assert sniff_format(b"PK\x03\x04 not really a zip") is None
    assert sniff_format(b"plain words") is None


def test_a_bomb_declared_in_the_zip_directory_is_refused_without_inflating() -> None:
    with pytest.raises(UnreadableDocumentError) as refused:
        check_upload(files.docx_declaring_a_bomb(), DocumentFormat.DOCX, BOUNDS)
    assert refused.value.kind == "decompression_bomb"
    check_upload(files.contract_as("docx", "1. TERM"), DocumentFormat.DOCX, BOUNDS)


def test_a_zip_lying_about_its_sizes_is_caught_while_inflating() -> None:
    hidden = files.docx_hiding_a_bomb()
    check_upload(hidden, DocumentFormat.DOCX, BOUNDS)  # the directory looks harmless
    with pytest.raises(UnreadableDocumentError) as refused:
        check_actual_sizes(hidden, BOUNDS)
    assert refused.value.kind == "decompression_bomb"
    assert str(refused.value).startswith("decompression_bomb: ")


def test_page_starts_point_at_each_page_of_the_joined_text() -> None:
    text, starts = join_pages(["one", "", "three"])
    assert starts == (0, 5, 7)
    assert [text[s:].split("\n\n")[0] for s in starts] == ["one", "", "three"]
    assert join_pages(["only"]) == ("only", (0,))


def test_a_docx_gives_headings_paragraphs_and_tables_split_at_page_breaks() -> None:
    document = docx.Document()
    document.add_heading("1. FEES", level=1)
    document.add_paragraph("The Customer pays within 30 days.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Fee", "USD 5,000"
    table.cell(1, 0).merge(table.cell(1, 1)).text = "merged"
    document.add_page_break()
    document.add_paragraph("Page two.")
    buffer = io.BytesIO()
    document.save(buffer)
    reader = DocxReader(buffer.getvalue(), PageLimits.of(Settings()), BOUNDS)
    pages = [reader.read_page(i).text for i in range(reader.page_count)]
    assert pages == [
        # A merged cell stands in each column it spans, so its row lines up with the others.
        "1. FEES\n\nThe Customer pays within 30 days.\n\nFee | USD 5,000\nmerged | merged",
        "Page two.",
    ]


def test_a_docx_with_more_pages_than_allowed_is_refused() -> None:
    document = docx.Document()
    for _ in range(3):
        document.add_paragraph("x")
        document.add_page_break()
    buffer = io.BytesIO()
    document.save(buffer)
    limits = PageLimits.of(Settings(max_document_pages=2))
    with pytest.raises(UnreadableDocumentError) as refused:
        DocxReader(buffer.getvalue(), limits, BOUNDS)
    assert refused.value.kind == "too_many_pages"
