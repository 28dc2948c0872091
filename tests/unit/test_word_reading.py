"""Word files in full, as a reader sees them: a file LibreOffice saved (tests/fixtures/word,
remade by make.sh there) and OOXML written here for what LibreOffice cannot save. The
real workers meet the hostile ones in tests/integration/test_document_formats.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.docx_reader import DocxReader
from docpipe.extraction.pages import PageLimits
from docpipe.extraction.word.story import MAX_NESTING
from docpipe.extraction.zipguard import ZipBounds
from docpipe.settings import Settings
from tests import word_files as word
from tests.word_files import p

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
        "<w:p><w:r><w:t xml:space=\"preserve\">Pay within </w:t></w:r>"
        + run("w:del", "thirty", "w:delText") + run("w:ins", "sixty")
        + '<w:r><w:t xml:space="preserve"> days</w:t></w:r>'
        + run("w:moveFrom", " in euros") + "</w:p>"
        + "<w:p>" + run("w:moveTo", "In euros.") + "</w:p>"
        + "<w:tbl><w:tr><w:tc>" + p("kept row") + "</w:tc></w:tr>"
        + '<w:tr><w:trPr><w:del w:id="2" w:author="a"/></w:trPr><w:tc>' + p("deleted row")
        + "</w:tc></w:tr></w:tbl>"
    )  # fmt: skip
    assert text(word.word_file(body)) == "Pay within sixty days\n\nIn euros.\n\nkept row"


def test_content_controls_are_read_through_and_placeholders_left_out() -> None:
    def control(content: str, *, placeholder: bool = False) -> str:
        properties = "<w:sdtPr><w:showingPlcHdr/></w:sdtPr>" if placeholder else "<w:sdtPr/>"
        return f"<w:sdt>{properties}<w:sdtContent>{content}</w:sdtContent></w:sdt>"

    body = (
        control(p("A block in a control."))
        + "<w:p><w:r><w:t xml:space=\"preserve\">Signed by </w:t></w:r>"
        + control("<w:r><w:t>Ada Lovelace</w:t></w:r>") + "</w:p>"
        + control(p("Click or tap here to enter text."), placeholder=True)
        + "<w:tbl>" + control("<w:tr><w:tc>" + p("a row in a control") + "</w:tc></w:tr>")
        + "</w:tbl>"
    )  # fmt: skip
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
    return (f'<w:lvl w:ilvl="{ilvl}"><w:start w:val="1"/><w:numFmt w:val="{fmt}"/>'
            f'<w:lvlText w:val="{text}"/></w:lvl>')  # fmt: skip


NUMBERING = word.numbering(
    '<w:abstractNum w:abstractNumId="0">'
    + level(0, "decimal", "%1.") + level(1, "lowerLetter", "%2)")
    + level(2, "upperRoman", "%1.%2.%3") + "</w:abstractNum>"
    '<w:abstractNum w:abstractNumId="1"><w:lvl w:ilvl="0"><w:numFmt w:val="bullet"/>'
    '<w:lvlText w:val="\uf0b7"/></w:lvl></w:abstractNum>'
    '<w:num w:numId="1"><w:abstractNumId w:val="0"/></w:num>'
    '<w:num w:numId="2"><w:abstractNumId w:val="0"/></w:num>'
    '<w:num w:numId="3"><w:abstractNumId w:val="0"/>'
    '<w:lvlOverride w:ilvl="0"><w:startOverride w:val="1"/></w:lvlOverride></w:num>'
    '<w:num w:numId="4"><w:abstractNumId w:val="1"/></w:num>'
)  # fmt: skip


def item(words: str, num_id: int, level: int = 0) -> str:
    return p(words, f'<w:numPr><w:ilvl w:val="{level}"/><w:numId w:val="{num_id}"/></w:numPr>')


def test_list_items_carry_their_numbers_and_bullets_as_word_shows_them() -> None:
    body = (
        item("Services", 1) + item("hosting", 1, 1) + item("support", 1, 1)
        + item("uptime", 1, 2) + item("Fees", 1) + item("due monthly", 1, 1)
        + item("Term", 2)  # another list of the same definition continues it
        + item("Again from one", 3)  # unless it restarts
        + item("a bullet", 4)
    )  # fmt: skip
    # Each number in its own level's format: "%1.%2.%3" under "1." and "b)" is "1.b.I".
    assert text(word.word_file(body, {"numbering.xml": NUMBERING})).split("\n\n") == [
        "1. Services", "a) hosting", "b) support", "1.b.I uptime", "2. Fees", "a) due monthly",
        "3. Term", "1. Again from one", "• a bullet",
    ]  # fmt: skip


def test_headers_and_footers_are_read_once_each_and_marked() -> None:
    parts = {"header1.xml": word.header(p("ACME confidential")),
             "header2.xml": word.header(p("ACME confidential")),  # the first page's, the same
             "footer1.xml": word.footer(p("Version 3"))}  # fmt: skip
    references = ('<w:headerReference w:type="default" r:id="rId1"/>'
                  '<w:headerReference w:type="first" r:id="rId2"/>'
                  '<w:footerReference w:type="default" r:id="rId3"/>')  # fmt: skip
    # Two sections that name the same header and footer.
    body = (f"<w:p><w:pPr><w:sectPr>{references}</w:sectPr></w:pPr>"
            "<w:r><w:t>Section one.</w:t></w:r></w:p>"
            '<w:p><w:r><w:br w:type="page"/><w:t>Section two.</w:t></w:r></w:p>')  # fmt: skip
    assert pages(word.word_file(body, parts, section=references)) == [
        "[header] ACME confidential\n\nSection one.",
        "Section two.\n\n[footer] Version 3",
    ]


def _full_featured(*, strict: bool) -> bytes:
    note = '<w:footnote w:id="1">' + p("A note.") + "</w:footnote>"
    parts = {"header1.xml": word.header(p("Header text")),
             "footnotes.xml": word.footnotes(note), "numbering.xml": NUMBERING}  # fmt: skip
    body = (
        '<w:p><w:r><w:t>Cited</w:t></w:r><w:r><w:footnoteReference w:id="1"/></w:r></w:p>'
        + item("first item", 1)
        + '<w:p><w:r><w:t>Anchor</w:t></w:r>' + word.text_box("boxed") + "</w:p>"
        + word.table([p("a"), p("b")])
        + _math(f"<m:sSup><m:e>{_r('e')}</m:e><m:sup>{_r('x')}</m:sup></m:sSup>")
    )  # fmt: skip
    return word.word_file(body, parts, section='<w:headerReference w:type="default" r:id="rId1"/>',
                          strict=strict)  # fmt: skip


def test_a_strict_open_xml_file_reads_like_the_usual_kind() -> None:
    strict = _full_featured(strict=True)
    assert b"purl.oclc.org/ooxml/wordprocessingml/main" in word.member(strict, "word/document.xml")
    expected = ("[header] Header text\n\nCited[1]\n\n1. first item\n\nAnchor\n\nboxed\n\na | b"
                "\n\ne^x\n\n[1] A note.")  # fmt: skip
    assert pages(_full_featured(strict=False)) == [expected]
    assert pages(strict) == [expected]


def test_a_zip_whose_main_part_is_not_a_word_document_is_a_format_mismatch() -> None:
    data = word.word_file(p("x"))
    types = word.member(data, "[Content_Types].xml")
    data = word.with_member(data, "[Content_Types].xml", types.replace(
        b"wordprocessingml.document.main+xml", b"spreadsheetml.sheet.main+xml"))  # fmt: skip
    with pytest.raises(UnreadableDocumentError) as refused:
        pages(data)
    assert refused.value.kind == "format_mismatch"


def test_a_document_part_that_is_not_xml_is_corrupt() -> None:
    with pytest.raises(UnreadableDocumentError) as refused:
        pages(word.word_file("<w:p><w:r><w:t>unclosed</w:r></w:p>"))
    assert refused.value.kind == "corrupt"


def test_tables_nested_a_few_deep_read_inline() -> None:
    assert text(word.deeply_nested_tables(3)) == "[[the innermost cell]]"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (word.many_text_boxes(10_000), "more than 2000 text boxes"),
        (word.deeply_nested_tables(MAX_NESTING + 1), f"nested more than {MAX_NESTING} deep"),
        (word.deeply_nested_tables(1000), "more than 256 levels deep"),
    ],
    ids=["ten-thousand-text-boxes", "past-the-nesting-bound", "a-thousand-tables-deep"],
)
def test_files_built_to_exhaust_the_reader_are_too_complex(data: bytes, message: str) -> None:
    with pytest.raises(UnreadableDocumentError) as refused:
        pages(data)
    assert refused.value.kind == "too_complex"
    assert message in str(refused.value)


def test_blocks_wrapped_in_alternate_content_at_body_level_are_read_once() -> None:
    wrapped = ('<mc:AlternateContent><mc:Choice Requires="w14">' + p("chosen block")
               + "</mc:Choice><mc:Fallback>" + p("fallback block") + "</mc:Fallback>"
               "</mc:AlternateContent>")  # fmt: skip
    assert text(word.word_file(p("before") + wrapped + p("after"))) == (
        "before\n\nchosen block\n\nafter"
    )
