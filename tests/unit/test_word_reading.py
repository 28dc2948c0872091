"""Word files in full, as a reader sees them: a file LibreOffice saved (tests/fixtures/word,
remade by make.sh there) and OOXML written here for what LibreOffice cannot save. The
real workers meet the hostile ones in tests/integration/test_document_formats.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.pages import PageLimits
from docpipe.extraction.word import package
from docpipe.extraction.word.numbering import MAX_LABEL_CHARS
from docpipe.extraction.word.story import MAX_NESTING
from docpipe.extraction.zipguard import ZipBounds
from docpipe.settings import Settings
from docpipe_dev import word_xml as word
from docpipe_dev.hostile import word as hostile_word
from docpipe_dev.hostile.corpus import CORPUS, HostileFile
from docpipe_dev.word_xml import p

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "word"
BOUNDS = ZipBounds(max_bytes=100_000_000, max_ratio=100)


def pages(data: bytes) -> list[str]:
    reader = DocxReader(data, PageLimits.of(Settings()), BOUNDS)
    return [reader.read_page(i).text for i in range(reader.page_count)]


def text(data: bytes) -> str:
    return "\n\n".join(pages(data))


def test_a_file_libreoffice_saved_reads_in_full_in_reading_order() -> None:
    assert pages((FIXTURES / "features.docx").read_bytes()) == [
        "[header] ACME Services Agreement, confidential\n\n"
        "Services Agreement\n\n"
        "The term is twelve months[1] and renews once[i].\n\n"
        "Invoices are due within sixty days.\n\n"  # "thirty" was deleted, "sixty" inserted
        "1. Services\n\na) hosting\n\nb) support\n\n2. Fees\n\n"
        "• monthly report\n\n"
        "Anchor of a frame\n\nText inside the frame\n\n"
        "Anchor of a shape\n\nText inside the shape\n\n"
        "The share is (a+b)/(c^2) of the total.\n\n"
        "Parties | Parties\n"
        "Provider • ACME Ltd | [Name | Role; Ada | Signatory]\n\n"
        "[1] Counted from the signature date.",
        "Second page.\n\n[i] Unless either party objects.\n\n[footer] Page 2",
    ]


def test_a_shape_word_stores_twice_is_read_once_from_its_drawing() -> None:
    anchored = "<w:p><w:r><w:t>Anchor</w:t></w:r>{}</w:p>"
    assert text(word.word_file(anchored.format(word.text_box("in the box")))) == (
        "Anchor\n\nin the box"
    )
    # The VML copy is for readers that know no DrawingML: never read beside it.
    differing = word.text_box("drawing copy", fallback="vml copy")
    assert text(word.word_file(anchored.format(differing))) == "Anchor\n\ndrawing copy"


def test_tracked_changes_read_as_accepted() -> None:
    def run(tag: str, words: str, text_tag: str = "w:t") -> str:
        return f'<{tag} w:id="1" w:author="a"><w:r><{text_tag}>{words}</{text_tag}></w:r></{tag}>'

    body = (
        '<w:p><w:r><w:t xml:space="preserve">Pay within </w:t></w:r>'
        + run("w:del", "thirty", "w:delText")
        + run("w:ins", "sixty")
        + '<w:r><w:t xml:space="preserve"> days</w:t></w:r>'
        + run("w:moveFrom", " in euros")
        + "</w:p>"
        + "<w:p>"
        + run("w:moveTo", "In euros.")
        + "</w:p>"
        + "<w:tbl><w:tr><w:tc>"
        + p("kept row")
        + "</w:tc></w:tr>"
        + '<w:tr><w:trPr><w:del w:id="2" w:author="a"/></w:trPr><w:tc>'
        + p("deleted row")
        + "</w:tc></w:tr></w:tbl>"
    )
    assert text(word.word_file(body)) == "Pay within sixty days\n\nIn euros.\n\nkept row"


def test_content_controls_are_read_through_and_placeholders_left_out() -> None:
    def control(content: str, *, placeholder: bool = False) -> str:
        properties = "<w:sdtPr><w:showingPlcHdr/></w:sdtPr>" if placeholder else "<w:sdtPr/>"
        return f"<w:sdt>{properties}<w:sdtContent>{content}</w:sdtContent></w:sdt>"

    body = (
        control(p("A block in a control."))
        + '<w:p><w:r><w:t xml:space="preserve">Signed by </w:t></w:r>'
        + control("<w:r><w:t>Ada Lovelace</w:t></w:r>")
        + "</w:p>"
        + control(p("Click or tap here to enter text."), placeholder=True)
        + "<w:tbl>"
        + control("<w:tr><w:tc>" + p("a row in a control") + "</w:tc></w:tr>")
        + "</w:tbl>"
    )
    assert text(word.word_file(body)) == (
        "A block in a control.\n\nSigned by Ada Lovelace\n\na row in a control"
    )


def _math(omml: str) -> str:
    return f"<w:p><m:oMathPara><m:oMath>{omml}</m:oMath></m:oMathPara></w:p>"


def _r(symbols: str) -> str:
    return f"<m:r><m:t>{symbols}</m:t></m:r>"


@pytest.mark.parametrize(
    ("omml", "linear"),
    [
        (f"<m:f><m:num>{_r('a+b')}</m:num><m:den>{_r('2')}</m:den></m:f>", "(a+b)/2"),
        (f"<m:sSup><m:e>{_r('x')}</m:e><m:sup>{_r('2')}</m:sup></m:sSup>", "x^2"),
        (
            f"<m:sSubSup><m:e>{_r('x')}</m:e><m:sub>{_r('i')}</m:sub><m:sup>{_r('n+1')}</m:sup>"
            "</m:sSubSup>",
            "x_i^(n+1)",
        ),
        (
            f'<m:rad><m:radPr><m:degHide m:val="1"/></m:radPr><m:deg/><m:e>{_r("x+1")}</m:e>'
            "</m:rad>",
            "√(x+1)",
        ),
        (
            '<m:nary><m:naryPr><m:chr m:val="∑"/></m:naryPr>'
            f"<m:sub>{_r('i=1')}</m:sub><m:sup>{_r('n')}</m:sup><m:e>{_r('i')}</m:e></m:nary>",
            "∑_(i=1)^n i",
        ),
        (f"<m:d><m:e>{_r('a')}</m:e><m:e>{_r('b')}</m:e></m:d>", "(a|b)"),
        (f"<m:func><m:fName>{_r('sin')}</m:fName><m:e>{_r('x')}</m:e></m:func>", "sin x"),
        (
            f"<m:m><m:mr><m:e>{_r('1')}</m:e><m:e>{_r('0')}</m:e></m:mr>"
            f"<m:mr><m:e>{_r('0')}</m:e><m:e>{_r('1')}</m:e></m:mr></m:m>",
            "[1, 0; 0, 1]",
        ),
    ],
    ids=["fraction", "power", "sub-super", "root", "sum", "delimiters", "function", "matrix"],
)
def test_equations_read_as_linear_text(omml: str, linear: str) -> None:
    assert text(word.word_file(_math(omml))) == linear


def level(ilvl: int, fmt: str, text: str) -> str:
    return (
        f'<w:lvl w:ilvl="{ilvl}"><w:start w:val="1"/><w:numFmt w:val="{fmt}"/>'
        f'<w:lvlText w:val="{text}"/></w:lvl>'
    )


NUMBERING = word.numbering(
    '<w:abstractNum w:abstractNumId="0">'
    + level(0, "decimal", "%1.")
    + level(1, "lowerLetter", "%2)")
    + level(2, "upperRoman", "%1.%2.%3")
    + "</w:abstractNum>"
    '<w:abstractNum w:abstractNumId="1"><w:lvl w:ilvl="0"><w:numFmt w:val="bullet"/>'
    '<w:lvlText w:val="\uf0b7"/></w:lvl></w:abstractNum>'
    '<w:num w:numId="1"><w:abstractNumId w:val="0"/></w:num>'
    '<w:num w:numId="2"><w:abstractNumId w:val="0"/></w:num>'
    '<w:num w:numId="3"><w:abstractNumId w:val="0"/>'
    '<w:lvlOverride w:ilvl="0"><w:startOverride w:val="1"/></w:lvlOverride></w:num>'
    '<w:num w:numId="4"><w:abstractNumId w:val="1"/></w:num>'
)


def item(words: str, num_id: int, level: int = 0) -> str:
    return p(words, f'<w:numPr><w:ilvl w:val="{level}"/><w:numId w:val="{num_id}"/></w:numPr>')


def test_list_items_carry_their_numbers_and_bullets_as_word_shows_them() -> None:
    body = (
        item("Services", 1)
        + item("hosting", 1, 1)
        + item("support", 1, 1)
        + item("uptime", 1, 2)
        + item("Fees", 1)
        + item("due monthly", 1, 1)
        + item("Term", 2)  # another list of the same definition continues it
        + item("Again from one", 3)  # unless it restarts
        + item("a bullet", 4)
    )
    # Each number in its own level's format: "%1.%2.%3" under "1." and "b)" is "1.b.I".
    assert text(word.word_file(body, {"numbering.xml": NUMBERING})).split("\n\n") == [
        "1. Services",
        "a) hosting",
        "b) support",
        "1.b.I uptime",
        "2. Fees",
        "a) due monthly",
        "3. Term",
        "1. Again from one",
        "• a bullet",
    ]


def test_headers_and_footers_are_read_once_each_and_marked() -> None:
    parts = {
        "header1.xml": word.header(p("ACME confidential")),
        "header2.xml": word.header(p("ACME confidential")),  # the first page's, the same
        "footer1.xml": word.footer(p("Version 3")),
    }
    references = (
        '<w:headerReference w:type="default" r:id="rId1"/>'
        '<w:headerReference w:type="first" r:id="rId2"/>'
        '<w:footerReference w:type="default" r:id="rId3"/>'
    )
    # Two sections that name the same header and footer.
    body = (
        f"<w:p><w:pPr><w:sectPr>{references}</w:sectPr></w:pPr>"
        "<w:r><w:t>Section one.</w:t></w:r></w:p>"
        '<w:p><w:r><w:br w:type="page"/><w:t>Section two.</w:t></w:r></w:p>'
    )
    assert pages(word.word_file(body, parts, section=references)) == [
        "[header] ACME confidential\n\nSection one.",
        "Section two.\n\n[footer] Version 3",
    ]


def _full_featured(*, strict: bool) -> bytes:
    note = '<w:footnote w:id="1">' + p("A note.") + "</w:footnote>"
    parts = {
        "header1.xml": word.header(p("Header text")),
        "footnotes.xml": word.footnotes(note),
        "numbering.xml": NUMBERING,
    }
    body = (
        '<w:p><w:r><w:t>Cited</w:t></w:r><w:r><w:footnoteReference w:id="1"/></w:r></w:p>'
        + item("first item", 1)
        + "<w:p><w:r><w:t>Anchor</w:t></w:r>"
        + word.text_box("boxed")
        + "</w:p>"
        + word.table([p("a"), p("b")])
        + _math(f"<m:sSup><m:e>{_r('e')}</m:e><m:sup>{_r('x')}</m:sup></m:sSup>")
    )
    return word.word_file(
        body, parts, section='<w:headerReference w:type="default" r:id="rId1"/>', strict=strict
    )


def test_a_strict_open_xml_file_reads_like_the_usual_kind() -> None:
    strict = _full_featured(strict=True)
    assert b"purl.oclc.org/ooxml/wordprocessingml/main" in word.member(strict, "word/document.xml")
    expected = (
        "[header] Header text\n\nCited[1]\n\n1. first item\n\nAnchor\n\nboxed\n\na | b"
        "\n\ne^x\n\n[1] A note."
    )
    assert pages(_full_featured(strict=False)) == [expected]
    assert pages(strict) == [expected]


def test_a_strict_file_naming_many_elements_leaves_a_bounded_renaming_cache() -> None:
    # Strict names are renamed to their usual ones through a cache; a hostile file naming
    # 20,000 elements of its own must not leave 20,000 entries in the worker process.
    names = "".join(f"<w:x{i}/>" for i in range(20_000))
    strict = word.word_file(p("Kept.") + f"<w:p>{names}</w:p>", strict=True)
    assert pages(strict) == ["Kept."]
    cache = package._transitional_name.cache_info()
    assert cache.maxsize is not None
    assert cache.currsize <= cache.maxsize < 20_000


def test_a_zip_whose_main_part_is_not_a_word_document_is_a_format_mismatch() -> None:
    data = word.word_file(p("x"))
    types = word.member(data, "[Content_Types].xml")
    data = word.with_member(
        data,
        "[Content_Types].xml",
        types.replace(b"wordprocessingml.document.main+xml", b"spreadsheetml.sheet.main+xml"),
    )
    with pytest.raises(UnreadableDocumentError) as refused:
        pages(data)
    assert refused.value.kind == "format_mismatch"


def test_a_document_part_that_is_not_xml_is_corrupt() -> None:
    with pytest.raises(UnreadableDocumentError) as refused:
        pages(word.word_file("<w:p><w:r><w:t>unclosed</w:r></w:p>"))
    assert refused.value.kind == "corrupt"


def test_tables_nested_a_few_deep_read_inline() -> None:
    assert text(hostile_word.deeply_nested_tables(3)) == "[[the innermost cell]]"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (hostile_word.many_text_boxes(10_000), "more than 2000 text boxes"),
        (
            hostile_word.deeply_nested_tables(MAX_NESTING + 1),
            f"nested more than {MAX_NESTING} deep",
        ),
        (hostile_word.deeply_nested_tables(1000), "more than 256 levels deep"),
    ],
    ids=["ten-thousand-text-boxes", "past-the-nesting-bound", "a-thousand-tables-deep"],
)
def test_files_built_to_exhaust_the_reader_are_too_complex(data: bytes, message: str) -> None:
    with pytest.raises(UnreadableDocumentError) as refused:
        pages(data)
    assert refused.value.kind == "too_complex"
    assert message in str(refused.value)


def test_blocks_wrapped_in_alternate_content_at_body_level_are_read_once() -> None:
    wrapped = (
        '<mc:AlternateContent><mc:Choice Requires="w14">'
        + p("chosen block")
        + "</mc:Choice><mc:Fallback>"
        + p("fallback block")
        + "</mc:Fallback>"
        "</mc:AlternateContent>"
    )
    assert text(word.word_file(p("before") + wrapped + p("after"))) == (
        "before\n\nchosen block\n\nafter"
    )


@pytest.mark.parametrize("hostile", [f for f in CORPUS if f.fmt == "docx"], ids=lambda f: f.name)
def test_each_hostile_word_file_ends_as_its_documented_kind(hostile: HostileFile) -> None:
    if hostile.kind is None:
        assert text(hostile.make()), "it reads, within its bounds"
        return
    with pytest.raises(UnreadableDocumentError) as refused:
        pages(hostile.make())
    assert refused.value.kind == hostile.kind


def test_what_a_file_expands_into_is_counted_while_it_is_read() -> None:
    # 200 characters in one cell merged over 30 rows and spanning 3 columns: 30 x 3 copies.
    first = (
        '<w:tc><w:tcPr><w:gridSpan w:val="3"/><w:vMerge w:val="restart"/></w:tcPr>'
        + p("x" * 200)
        + "</w:tc>"
    )
    below = '<w:tc><w:tcPr><w:gridSpan w:val="3"/><w:vMerge/></w:tcPr><w:p/></w:tc>'
    data = word.word_file(
        f"<w:tbl><w:tr>{first}</w:tr>" + f"<w:tr>{below}</w:tr>" * 29 + "</w:tbl>"
    )
    assert len(text(data)) == 30 * (3 * 200 + 2 * 3) + 29  # rows joined by line breaks
    limits = replace(PageLimits.of(Settings()), max_document_chars=30 * 3 * 200)
    with pytest.raises(UnreadableDocumentError) as refused:
        DocxReader(data, limits, BOUNDS)
    assert refused.value.kind == "too_much_text"
    assert f"past {30 * 3 * 200} characters (DOCPIPE_MAX_DOCUMENT_CHARS" in str(refused.value)


def test_a_part_larger_than_its_bound_is_refused_before_it_is_parsed() -> None:
    data = word.word_file(p("x" * 5_000))
    limits = replace(PageLimits.of(Settings()), max_part_bytes=4_000)
    with pytest.raises(UnreadableDocumentError) as refused:
        DocxReader(data, limits, BOUNDS)
    assert refused.value.kind == "too_complex"
    assert "word/document.xml is " in str(refused.value)
    assert "(at most 4000, DOCPIPE_DOCX_MAX_PART_BYTES)" in str(refused.value)


def test_a_reading_past_its_deadline_is_too_slow() -> None:
    with pytest.raises(UnreadableDocumentError) as refused:
        DocxReader(word.word_file(p("on time")), PageLimits.of(Settings()), BOUNDS, deadline=0.0)
    assert refused.value.kind == "too_slow"


def test_notes_are_numbered_through_the_document_and_written_once() -> None:
    def cite(note: int) -> str:
        return f'<w:r><w:footnoteReference w:id="{note}"/></w:r>'

    notes = word.footnotes(
        f'<w:footnote w:id="7"><w:p><w:r><w:t>first, see </w:t></w:r>{cite(8)}</w:p></w:footnote>'
        '<w:footnote w:id="8"><w:p><w:r><w:t>second</w:t></w:r></w:p></w:footnote>'
        f'<w:footnote w:id="9"><w:p><w:r><w:t>itself </w:t></w:r>{cite(9)}</w:p></w:footnote>'
    )
    body = (
        f"<w:p><w:r><w:t>One</w:t></w:r>{cite(7)}</w:p>"
        f"<w:p><w:r><w:t>Two</w:t></w:r>{cite(9)}{cite(8)}</w:p>"
    )
    assert text(word.word_file(body, {"footnotes.xml": notes})) == (
        "One[1]\n\nTwo[3][2]\n\n[1] first, see [2]\n\n[2] second\n\n[3] itself [3]"
    )


def test_list_labels_longer_than_any_word_list_are_too_complex() -> None:
    with pytest.raises(UnreadableDocumentError) as refused:
        pages(hostile_word.letter_numbering(start=26 * MAX_LABEL_CHARS + 1, items=1))
    assert refused.value.kind == "too_complex"
    assert text(hostile_word.letter_numbering(start=26 * 3 + 2, items=1)) == "bbbb) an item"
