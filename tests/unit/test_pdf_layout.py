"""PDF text layers as people make them, read in reading order: columns column by column,
tables row by row, a formula drawn glyph by glyph in its order, a page whose lines run down
the page turned to read; the measure that tells a text layer of real words from garbage;
and where the words stand, bounded, for boxes over a page (docpipe.extraction.layout,
text_layer, quality and geometry, without Tesseract)."""

from __future__ import annotations

import io
import re

import pypdfium2 as pdfium
import pytest

from docpipe.extraction.geometry import MAX_WORDS, PageGeometry
from docpipe.extraction.layout import Fragment, lay_out
from docpipe.extraction.pages import PageLimits, PageText
from docpipe.extraction.pdf import PdfReader
from docpipe.extraction.quality import text_layer_score
from docpipe.settings import Settings
from docpipe_dev.sample_files import contract_in_columns, contract_pdf
from docpipe_dev.samples import sample_contracts
from docpipe_dev.word_recall import word_recall
from tests.support.document_files import bad_ocr, pdf_with_a_formula_drawn_glyph_by_glyph, shifted

LIMITS = PageLimits.of(Settings())
CONTRACT = sample_contracts(3)[2]


def read_pages(data: bytes) -> list[PageText]:
    reader = PdfReader(data, LIMITS)
    try:
        return [reader.read_page(i) for i in range(reader.page_count)]
    finally:
        reader.close()


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("€", "EUR ")).strip()


def test_two_columns_are_read_column_by_column() -> None:
    pages = read_pages(contract_in_columns(CONTRACT.text))
    assert len(pages) >= 2 and not any(p.ocr for p in pages)
    text = flat("\n\n".join(p.text for p in pages))
    assert word_recall(CONTRACT.text, text) == 1.0
    # Every paragraph reads whole, and after the one before it: no line of the right
    # column comes between two lines of the left one.
    at = 0
    for paragraph in (p for p in CONTRACT.text.split("\n\n") if p.strip()):
        found = text.find(flat(paragraph), at)
        assert found >= 0, paragraph
        at = found


def test_a_single_column_contract_reads_as_it_always_did() -> None:
    pages = read_pages(contract_pdf(CONTRACT.text))
    assert flat(" ".join(p.text for p in pages)) == flat(CONTRACT.text)
    # Paragraphs apart by a blank line, as typed.
    assert "\n\n1. SCOPE OF SERVICES\n\n1.1 " in pages[0].text
    assert all(
        p.rotation == 0 and p.text_layer_score == pytest.approx(1.0, abs=0.01) for p in pages
    )


@pytest.mark.parametrize("seed", range(4))
def test_a_formula_drawn_glyph_by_glyph_keeps_its_characters_in_order(seed: int) -> None:
    data, sentence = pdf_with_a_formula_drawn_glyph_by_glyph(seed)
    assert read_pages(data)[0].text == sentence


def test_a_page_shown_sideways_by_its_rotate_is_turned_to_read_its_lines() -> None:
    pdf = pdfium.PdfDocument(contract_pdf(CONTRACT.text))
    pdf[0].set_rotation(90)
    buffer = io.BytesIO()
    pdf.save(buffer)
    upright, sideways = read_pages(contract_pdf(CONTRACT.text))[0], read_pages(buffer.getvalue())[0]
    assert sideways.text == upright.text
    assert sideways.rotation == 270  # shown with its lines running down: a quarter back


def fragment(text: str, left: float, top: float, *, size: float = 10.0) -> Fragment:
    return Fragment(text, (left, top, left + 0.55 * size * len(text), top + size))


def test_a_table_is_read_row_by_row_and_a_label_stays_beside_its_value() -> None:
    rows = [("Item", "Price"), ("Analysis", "EUR 5,000"), ("Reporting", "EUR 1,200")]
    fragments = [
        fragment(word, x, 100 + 14 * i)
        for i, row in enumerate(rows)
        for word, x in zip(row, (72, 300), strict=True)
    ]
    assert lay_out(fragments).text == "Item Price\nAnalysis EUR 5,000\nReporting EUR 1,200"


def test_sub_and_superscripts_stay_in_their_line() -> None:
    fragments = [
        fragment("x", 72, 100),
        fragment("2", 77.6, 96, size=6),
        fragment("+", 85, 100),
        fragment("y", 93, 100),
        fragment("i", 98.6, 106, size=6),
    ]
    assert lay_out(list(reversed(fragments))).text == "x2 + yi"


def test_each_word_knows_its_place_in_the_text() -> None:
    words = [fragment("Term:", 72, 100), fragment("twelve", 110, 100), fragment("months", 72, 114)]
    layout = lay_out(words)
    assert layout.text == "Term: twelve\nmonths"
    assert [layout.text[w.start : w.end] for w in layout.words] == ["Term:", "twelve", "months"]
    assert [w.box for w in layout.words] == [f.box for f in words]


def test_a_word_broken_at_a_line_end_is_joined_with_its_rest() -> None:
    broken = Fragment("termi", (72, 100, 100, 110), continues=True)
    layout = lay_out([broken, fragment("nation", 72, 114), fragment("applies", 110, 114)])
    assert layout.text == "termination applies"
    assert [layout.text[w.start : w.end] for w in layout.words] == ["termi", "nation", "applies"]


REAL_TEXT = [
    CONTRACT.text,
    "Der Auftragnehmer verpflichtet sich, die Leistungen fristgerecht zu erbringen. Die "
    "Vergütung beträgt 12.000 EUR zuzüglich Mehrwertsteuer, zahlbar binnen 30 Tagen.",
    "Исполнитель обязуется оказать услуги в срок, а Заказчик обязуется оплатить их в "  # noqa: RUF001
    "течение тридцати (30) дней с даты получения счёта.",  # noqa: RUF001
    "2020.3.30. 0시 기준 현재 코로나바이러스감염증-19(COVID-19)의 국내 확진자는 9,661명, "
    "사망자는 158명으로 나타났다. 이와 관련하여 세계보건기구(WHO)는 선언하였다.",
    "def total(items):\n    return sum(item.price * item.quantity for item in items)\n"
    "The function total adds the price of each item times its quantity.",
]


@pytest.mark.parametrize("text", REAL_TEXT, ids=["contract", "german", "russian", "korean", "code"])
def test_real_text_in_any_script_scores_high(text: str) -> None:
    assert text_layer_score(text) >= 0.8


@pytest.mark.parametrize(
    "garbage",
    [
        bad_ocr(CONTRACT.text, 0.2),
        shifted(CONTRACT.text),
        "".join(chr(0xE000 + ord(c)) if c.isalpha() else c for c in CONTRACT.text),
        "".join(chr(ord(c) % 30 + 1) if c.isalpha() else c for c in CONTRACT.text),
    ],
    ids=["bad-earlier-ocr", "wrong-encoding", "private-use-glyphs", "control-characters"],
)
def test_a_text_layer_without_real_words_scores_below_the_default(garbage: str) -> None:
    assert text_layer_score(garbage) < Settings().text_layer_min_score


def test_a_passage_over_several_lines_has_a_box_per_line() -> None:
    layout = lay_out(
        [
            fragment("The", 72, 100),
            fragment("fee", 95, 100),
            fragment("is", 118, 100),
            fragment("due", 72, 114),
            fragment("monthly.", 95, 114),
        ]
    )
    geometry = PageGeometry.of((595, 842), ((w.start, w.end, w.box) for w in layout.words))
    start = layout.text.index("fee")
    boxes = geometry.boxes(start, layout.text.index("monthly") + 3)
    assert len(boxes) == 2
    assert boxes[0][0] == 95 and boxes[0][2] == pytest.approx(118 + 0.55 * 10 * 2, abs=0.1)
    assert boxes[1][0] == 72 and boxes[1][1] == 114
    assert geometry.boxes(0, 3) == [(72, 100, 88.5, 110)]
    assert PageGeometry.from_json(geometry.as_json()) == geometry


def test_a_pages_geometry_stays_bounded_however_many_words_it_has() -> None:
    many = [
        (
            i * 2,
            i * 2 + 1,
            (float(i % 100) * 5, (i // 100) * 12.0, i % 100 * 5 + 4.0, (i // 100) * 12.0 + 10),
        )
        for i in range(3 * MAX_WORDS)
    ]
    geometry = PageGeometry.of((595, 842), many)
    assert len(geometry.words) <= MAX_WORDS
    # Merged with their neighbours on the line, the words still cover the whole text.
    assert geometry.words[0][0] == 0 and geometry.words[-1][1] == many[-1][1]
    assert geometry.boxes(many[-1][0], many[-1][1])[0][2] == many[-1][2][2]


def test_an_ocr_pages_boxes_are_kept_in_points() -> None:
    # Pixels of an image rendered at 300 dpi: a point is 300 / 72 of them.
    geometry = PageGeometry.of((2480, 3508), [(0, 4, (300, 600, 600, 650))], scale=72 / 300)
    assert (geometry.width, geometry.height) == (595.2, 841.9)
    assert geometry.words == ((0, 4, (72.0, 144.0, 144.0, 156.0)),)
