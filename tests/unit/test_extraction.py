"""Format detection, zip bounds, page maps and a reader's deadline, without a worker
(tests/integration/test_document_formats.py runs them through real workers and
Tesseract)."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import docx
import pytest

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction import DocumentFormat, check_upload, sniff_format
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.images import PixelBounds
from docpipe.extraction.pages import PageLimits, join_pages
from docpipe.extraction.pdf_process import PdfProcess
from docpipe.extraction.pixels import fit_within
from docpipe.extraction.zipguard import ZipBounds, check_actual_sizes
from docpipe.settings import Settings
from docpipe.worker.text_extraction import open_reader
from docpipe_dev.hostile import pdf as hostile_pdf
from docpipe_dev.hostile.zips import many_members
from tests.support import document_files as files

BOUNDS = ZipBounds(max_bytes=100_000_000, max_ratio=100)
PIXELS = PixelBounds.of(Settings())


def test_the_format_comes_from_the_bytes() -> None:
    assert sniff_format(files.contract_as("pdf", "1. TERM\n\nTwelve months.")) is DocumentFormat.PDF
    assert sniff_format(files.contract_as("docx", "1. TERM")) is DocumentFormat.DOCX
    assert sniff_format(b"\xef\xbb\xbf%PDF-1.4 after a BOM") is DocumentFormat.PDF
    assert sniff_format(files.not_a_docx_zip()) is None
    assert sniff_format(b"PK\x03\x04 not really a zip") is None
    assert sniff_format(b"plain words") is None


def test_a_bomb_declared_in_the_zip_directory_is_refused_without_inflating() -> None:
    with pytest.raises(UnreadableDocumentError) as refused:
        check_upload(files.docx_declaring_a_bomb(), DocumentFormat.DOCX, BOUNDS, PIXELS)
    assert refused.value.kind == "decompression_bomb"
    check_upload(files.contract_as("docx", "1. TERM"), DocumentFormat.DOCX, BOUNDS, PIXELS)


def test_a_zip_lying_about_its_sizes_is_caught_while_inflating() -> None:
    hidden = files.docx_hiding_a_bomb()
    check_upload(hidden, DocumentFormat.DOCX, BOUNDS, PIXELS)  # the directory looks harmless
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


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (many_members(20_000), "declares 20000 members (at most 10000)"),
        (many_members(60_000, declared=5), "directory is 3780000 bytes (at most 3000000"),
    ],
    ids=["declared", "lying-about-its-count"],
)
def test_a_zip_of_too_many_members_is_refused_from_its_end_record(
    data: bytes, message: str
) -> None:
    # zipfile would build an entry for each member first (a million take it seconds).
    for check in (sniff_format, lambda d: check_actual_sizes(d, BOUNDS)):
        with pytest.raises(UnreadableDocumentError) as refused:
            check(data)
        assert refused.value.kind == "decompression_bomb"
        assert message in str(refused.value)


def test_the_pixel_bound_holds_at_every_size() -> None:
    a4 = fit_within(595, 842, dpi=300, max_pixels=25_000_000, min_dpi=100, what="page 1")
    assert (a4.width, a4.height, a4.reduced) == (2480, 3509, False)
    # Up to 3,600 points (50 inches) a side fits at 100 dpi or more; past it, refused.
    for side in (3_000, 3_600):
        fit = fit_within(side, side, dpi=300, max_pixels=25_000_000, min_dpi=100, what="p")
        assert fit.width * fit.height <= 25_000_000 and fit.dpi >= 100 and fit.reduced
    for side in (3_601, 20_000, 720_000, 10**12):
        with pytest.raises(UnreadableDocumentError) as refused:
            fit_within(side, side, dpi=300, max_pixels=25_000_000, min_dpi=100, what="p")
        assert refused.value.kind == "page_too_large"
    with pytest.raises(UnreadableDocumentError) as degenerate:
        fit_within(0, 842, dpi=300, max_pixels=25_000_000, min_dpi=100, what="page 2")
    assert degenerate.value.kind == "corrupt"


@pytest.mark.parametrize("left_s", [0.0, 3.0], ids=["none-left", "less-than-the-page-takes"])
def test_a_pdf_ends_by_its_callers_deadline_before_its_pages_own_limit(left_s: float) -> None:
    """The slow scan takes minutes to draw for OCR, far past DOCPIPE_PDF_PAGE_TIMEOUT_S;
    given a deadline before that (the step's), opening or reading it ends too_slow by the
    deadline, not by the page's own limit."""
    settings = Settings(pdf_page_timeout_s=50)
    deadline = time.monotonic() + left_s

    def read() -> None:
        reader = open_reader(
            DocumentFormat.PDF, hostile_pdf.slow_to_render_scan(), settings, deadline=deadline
        )
        try:
            reader.read_page(0, deadline=deadline)
        finally:
            reader.close()

    with pytest.raises(UnreadableDocumentError) as refused:
        read()
    assert refused.value.kind == "too_slow"
    assert "within the time its step had left" in str(refused.value), refused.value


class SlowToStart(PdfProcess):
    """A reader whose interpreter takes 1.5 s to come up, as on a busy machine."""

    def _start(self) -> subprocess.Popen[bytes]:
        boot = (
            "import runpy, sys, time; time.sleep(1.5); sys.argv[0] = 'pdf_server'; "
            "runpy.run_module('docpipe.extraction.pdf_server', run_name='__main__')"
        )
        fd, max_bytes = str(self._fd), str(self._max_bytes)
        child = subprocess.Popen(
            [sys.executable, "-c", boot, fd, max_bytes],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(self._fd,),
        )
        self._child = child
        return child


def test_a_reader_slow_to_start_does_not_spend_the_pages_time_limit() -> None:
    """Starting the reader is the machine's cost: a page's 1 s limit (remembered as the
    document's too_slow) counts from when the reader is ready, not from its start."""
    pdf = SlowToStart(
        files.contract_as("pdf", "1. TERM\n\nTwelve months."), timeout_s=1, max_bytes=0
    )
    try:
        assert pdf.page_count == 1
        assert "TERM" in pdf.text_layer(0, max_chars=10_000).text
    finally:
        pdf.close()
