"""Real documents that nobody on the team wrote, read as a worker reads them, against the
text a careful converter reads from them (``../shared/corpus/real-documents``, read in
place: the files may not be copied into the repo). Every file must reach a word recall of
at least MIN_RECALL (docpipe_dev.word_recall)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from docpipe.extraction import sniff_format
from docpipe.extraction.pages import join_pages
from docpipe.settings import Settings
from docpipe.worker.text_extraction import open_reader
from docpipe_dev.word_recall import word_recall

MIN_RECALL = 0.95
# DOCPIPE_REAL_DOCUMENTS, else the shared folder beside the repository (as CI lays it out).
CORPUS = Path(
    os.environ.get("DOCPIPE_REAL_DOCUMENTS")
    or Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "real-documents"
)

REAL_DOCUMENTS = [
    "docx_rich_cells.docx",
    "lorem_ipsum.docx",
    "textbox.docx",
    "unit_test_headers.docx",
    "word_sample.docx",
    "word_tables.docx",
]


def extracted_text(path: Path) -> str:
    """The document's text as the extract_text step would record it."""
    data = path.read_bytes()
    fmt = sniff_format(data)
    assert fmt is not None, f"{path.name} is no PDF or DOCX"
    reader = open_reader(fmt, data, Settings())
    try:
        return join_pages([reader.read_page(i).text for i in range(reader.page_count)])[0]
    finally:
        reader.close()


@pytest.mark.parametrize("name", REAL_DOCUMENTS)
def test_a_real_document_reads_with_the_words_of_its_expected_text(name: str) -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"no real documents at {CORPUS} (set DOCPIPE_REAL_DOCUMENTS)")
    expected = (CORPUS / "expected" / f"{name}.md").read_text(encoding="utf-8")
    recall = word_recall(expected, extracted_text(CORPUS / name))
    assert recall >= MIN_RECALL, f"{name}: word recall {recall:.3f}"


def test_word_recall_counts_words_with_multiplicity_and_markup_aside() -> None:
    expected = "## Fees\n\n| **Fee** | <!-- image --> |\n| - | - |\n\n1. Fee due\n- fee"
    assert word_recall(expected, "Fees. Fee, fee, FEE: 1 due") == 1.0
    assert word_recall(expected, "Fees: fee 1 due") == 4 / 6  # "fee" three times, once here
    assert word_recall("", "anything") == 1.0
