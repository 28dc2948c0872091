"""Scans as they come, read by the PDF reader with the real Tesseract: pages fed into the
scanner sideways or upside down are read upright and the angle is recorded, the PDF's own
/Rotate is honoured, a page whose way up cannot be told is read as it lies, with a
warning; a scan whose text layer (an earlier OCR) holds no real words is OCRed again, one
whose layer is good is not."""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import cache

import pypdfium2 as pdfium
import pytest

from docpipe.extraction.ocr import OcrError, read_image
from docpipe.extraction.pages import PageLimits, PageText
from docpipe.extraction.pdf import PdfReader
from docpipe.settings import Settings
from docpipe_dev.sample_files import contract_scan, scan_with_text_layer
from docpipe_dev.word_recall import word_recall
from tests.support.document_files import bad_ocr, shifted

LIMITS = PageLimits.of(Settings())
ONE_PAGE = (
    "SERVICES AGREEMENT\n\n"
    "This Services Agreement is made between Northwind Traders Ltd and Contoso Analytics "
    "GmbH. The Supplier shall provide data analysis services to the Customer as described "
    "in the statement of work.\n\n"
    "1. TERM\n\n"
    "The term of this Agreement is twenty four months from the Effective Date. Either party "
    "may terminate this Agreement with ninety days written notice.\n\n"
    "2. FEES\n\n"
    "The Customer shall pay the invoices of the Supplier within thirty days of receipt. The "
    "total fees shall not exceed one hundred and twenty thousand euros."
)

# Slow: Tesseract reads whole scanned pages (about 40 s in all); make test-fast leaves it out.
pytestmark = pytest.mark.slow


def read_first_page(data: bytes) -> PageText:
    reader = PdfReader(data, LIMITS)
    try:
        return reader.read_page(0)
    finally:
        reader.close()


@cache
def upright() -> PageText:
    return read_first_page(contract_scan(ONE_PAGE, seed=2))


def with_rotate(data: bytes, degrees: int) -> bytes:
    """``data`` with its first page's /Rotate set to ``degrees``."""
    pdf = pdfium.PdfDocument(data)
    pdf[0].set_rotation(degrees)
    buffer = io.BytesIO()
    pdf.save(buffer)
    pdf.close()
    return buffer.getvalue()


def test_an_upright_scan_with_a_slight_skew_reads_as_it_lies() -> None:
    page = upright()
    assert word_recall(ONE_PAGE, page.text) >= 0.97, page.text
    assert (page.ocr, page.rotation, page.warnings) == (True, 0, ())


@pytest.mark.parametrize("turned", [90, 180, 270])
def test_a_page_scanned_sideways_or_upside_down_is_read_upright(turned: int) -> None:
    page = read_first_page(contract_scan(ONE_PAGE, seed=2, turned=turned))
    assert word_recall(ONE_PAGE, page.text) >= 0.97, page.text
    # The degrees clockwise that turn it back upright.
    assert page.rotation == (360 - turned) % 360
    assert page.confidence is not None and page.confidence > 85
    assert page.warnings == ()


def test_the_pdfs_own_rotate_is_honoured() -> None:
    # Stored sideways, shown upright by its /Rotate: nothing left to turn.
    stored_sideways = with_rotate(contract_scan(ONE_PAGE, seed=2, turned=270), 90)
    page = read_first_page(stored_sideways)
    assert word_recall(ONE_PAGE, page.text) >= 0.97, page.text
    assert page.rotation == 0
    # Stored upright, shown upside down by its /Rotate: turned back from how it is shown.
    shown_upside_down = with_rotate(contract_scan(ONE_PAGE, seed=2), 180)
    page = read_first_page(shown_upside_down)
    assert word_recall(ONE_PAGE, page.text) >= 0.97, page.text
    assert page.rotation == 180


def test_a_page_whose_way_up_cannot_be_told_is_read_as_it_lies_with_a_warning() -> None:
    # One sideways line: Tesseract reads it poorly, and it is too little text for
    # orientation detection to decide.
    page = read_first_page(contract_scan("Payment due in thirty days.", turned=270))
    assert page.rotation == 0
    kinds = [w.kind for w in page.warnings]
    assert "orientation_undecided" in kinds, page.warnings
    undecided = page.warnings[kinds.index("orientation_undecided")]
    assert (undecided.page, undecided.value) == (1, None)
    assert "read as it lies" in undecided.message


@pytest.mark.parametrize("layer", [bad_ocr, shifted], ids=["bad-earlier-ocr", "wrong-encoding"])
def test_a_text_layer_without_real_words_is_read_again_by_ocr(layer: Callable[[str], str]) -> None:
    garbage = layer(ONE_PAGE)
    page = read_first_page(scan_with_text_layer(ONE_PAGE, garbage))
    assert page.ocr
    assert word_recall(ONE_PAGE, page.text) >= 0.97, page.text
    # The decision and its measure, on the page.
    assert page.text_layer_score is not None and page.text_layer_score < LIMITS.text_layer_min_score
    assert [(w.kind, w.page, w.value) for w in page.warnings] == [
        ("garbage_text_layer", 1, page.text_layer_score)
    ]


def test_a_scan_whose_earlier_ocr_reads_well_keeps_its_text_layer() -> None:
    page = read_first_page(scan_with_text_layer(ONE_PAGE, ONE_PAGE))
    assert (page.ocr, page.warnings) == (False, ())
    assert page.text_layer_score is not None and page.text_layer_score > 0.95
    assert word_recall(ONE_PAGE, page.text) == 1.0


def test_tesseract_failing_says_so_and_keeps_its_output_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(OcrError) as failed:
        read_image(b"not an image at all", language="eng", dpi=300, timeout_s=30)
    assert str(failed.value) == "tesseract failed (exit 1); its output is in the worker's log"
    logged = [r.getMessage() for r in caplog.records if r.name == "docpipe.extraction.ocr"]
    assert logged and "tesseract failed (exit 1): " in logged[0], "its output is for operators"
