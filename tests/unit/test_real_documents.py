"""Real documents nobody on the team wrote (../shared/corpus/real-documents, test data of the
docling project with its expected text, README there): the text docpipe's readers give has
at least 95 % of the expected words, counted with multiplicity, Markdown markup aside.

The files are read where they are, never copied into the repository; without the folder
the tests are skipped. Generated cases of the same kinds (a scan turned 90, 180 and 270
degrees, two columns, a garbage text layer) are in tests/unit/test_pdf_layout.py and
tests/integration/test_scanned_pages.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from docpipe.extraction import DocumentFormat, sniff_format
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.pages import PageLimits
from docpipe.extraction.pdf import PdfReader
from docpipe.extraction.zipguard import ZipBounds
from docpipe.settings import Settings
from tests.document_files import word_recall

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "real-documents"
MIN_RECALL = 0.95
DOCUMENTS = [
    "multi_page.pdf",
    "normal_4pages.pdf",
    "code_and_formula.pdf",
    "ocr_test.pdf",
    "ocr_test_rotated_90.pdf",
]


def extracted_text(data: bytes) -> str:
    """The document's pages as the extract_text step joins them."""
    settings = Settings()
    limits = PageLimits.of(settings)
    if sniff_format(data) is DocumentFormat.PDF:
        reader: PdfReader | DocxReader = PdfReader(data, limits)
    else:
        bounds = ZipBounds(settings.docx_max_expanded_bytes, settings.docx_max_expansion_ratio)
        reader = DocxReader(data, limits, bounds)
    try:
        return "\n\n".join(reader.read_page(i).text for i in range(reader.page_count))
    finally:
        reader.close()


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no real-document corpus at {CORPUS}")
@pytest.mark.parametrize("name", DOCUMENTS)
def test_a_real_document_gives_its_expected_words(name: str) -> None:
    expected = (CORPUS / "expected" / f"{name}.md").read_text(encoding="utf-8")
    recall = word_recall(expected, extracted_text((CORPUS / name).read_bytes()))
    assert recall >= MIN_RECALL, f"{name}: word recall {recall:.3f}"
