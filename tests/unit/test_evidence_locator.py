"""The evidence locator: offsets point at the quoted passage however it was copied."""

import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docpipe.pipelines.evidence import (
    EVIDENCE_SCHEMA,
    MAX_QUOTE_CHARS,
    Support,
    evidence_for,
    evidence_records,
    locate_quote,
    normalised,
    page_of,
    section_of,
    support_label,
    support_of,
    unsupported_values,
)
from docpipe_dev.samples import sample_contracts

DOC = (
    "MASTER SERVICES AGREEMENT\n\n"
    "1. TERM\nThis Agreement shall remain in force for twenty-four (24)\n"
    "months from the Effective Date.\n\n"
    "2. TERMINATION\nEither party may terminate this Agreement on ninety (90) days'   prior "
    "written notice. Upon termi-\nnation, each party shall return the other's  materials.\n\n"
    "3. LIABILITY\nLiability is limited to \u201cUSD 250,000\u201d in the aggregate; see also "
    "the non-\ndisclosure terms.\n"
)


def located(document: str, quote: str) -> str:
    span = locate_quote(document, quote)
    assert span is not None, quote
    start, end = span
    assert normalised(document[start:end]) == normalised(quote)
    return document[start:end]


def test_an_exact_quote_is_found_at_its_offsets() -> None:
    quote = "Either party may terminate this Agreement"
    start, end = locate_quote(DOC, quote) or (0, 0)
    assert DOC[start:end] == quote
    assert start == DOC.index(quote)


def test_a_quote_copied_on_one_line_matches_text_broken_across_lines() -> None:
    text = located(DOC, "remain in force for twenty-four (24) months from the Effective Date.")
    assert "\n" in text


def test_repeated_spaces_in_the_document_or_the_quote_do_not_matter() -> None:
    assert located(DOC, "ninety (90) days' prior written notice").count("   ") == 1
    located(DOC, "ninety  (90)\tdays' prior\n written notice")


def test_a_word_hyphenated_at_a_line_end_is_found_from_the_joined_word() -> None:
    assert located(DOC, "Upon termination, each party") == "Upon termi-\nnation, each party"


def test_a_quote_that_keeps_the_hyphenated_line_break_is_found_too() -> None:
    assert located(DOC, "Upon termi-\n  nation, each party").startswith("Upon termi-\nnation")
    located(DOC, "Upon termi- nation, each party")


def test_a_compound_broken_after_its_own_hyphen_keeps_its_hyphen() -> None:
    assert located(DOC, "the non-disclosure terms") == "the non-\ndisclosure terms"


def test_quotation_mark_styles_are_interchangeable() -> None:
    assert located(DOC, 'limited to "USD 250,000"') == "limited to \u201cUSD 250,000\u201d"
    located(DOC, "the other\u2019s materials")


def test_a_soft_hyphen_inside_a_word_is_ignored() -> None:
    doc = "The Supplier shall indem\u00adnify the Customer."
    assert located(doc, "shall indemnify the Customer") == "shall indem\u00adnify the Customer"


@pytest.mark.parametrize(
    "quote",
    [
        "Either party may terminate this Agreement on thirty (30) days' notice",
        "Liability is unlimited",
        "0 days",  # only inside "90) days": a quote starts at a word boundary
        "ermination",  # part of a word
        "",
        "   \n ",
    ],
)
def test_a_quote_not_in_the_document_is_not_found(quote: str) -> None:
    assert locate_quote(DOC, quote) is None


def test_a_quote_longer_than_the_bound_is_not_searched() -> None:
    assert locate_quote("a " * MAX_QUOTE_CHARS, "a " * (MAX_QUOTE_CHARS // 2 + 1)) is None


def test_a_repeated_passage_is_taken_from_the_span_the_value_was_read_from() -> None:
    doc = "1. A\nPayment within 30 days.\n2. B\nPayment within 30 days.\n"
    second = doc.index("2. B")
    assert locate_quote(doc, "Payment within 30 days.") == (5, 28)
    start, end = locate_quote(doc, "Payment within 30 days.", near=(second, len(doc))) or (0, 0)
    assert start > second and doc[start:end] == "Payment within 30 days."
    assert locate_quote(doc, "1. A", near=(second, len(doc))) == (0, 4)  # else anywhere


def test_pages_are_numbered_from_one_by_their_start_offsets() -> None:
    assert page_of((0,), 0) == 1
    assert page_of((0,), 10_000) == 1
    starts = (0, 100, 250)
    assert [page_of(starts, o) for o in (0, 99, 100, 249, 250, 900)] == [1, 1, 2, 2, 3, 3]


def test_the_section_is_the_one_whose_span_holds_the_offset() -> None:
    sections = [
        {"number": "0", "title": "Preamble", "start": 0, "end": 10},
        {"number": "1", "title": "Term", "start": 10, "end": 30},
    ]
    assert section_of(sections, 0)["number"] == "0"  # type: ignore[index]
    assert section_of(sections, 10)["number"] == "1"  # type: ignore[index]
    assert section_of(sections, 30) is None


def test_evidence_names_offsets_page_and_section_of_a_found_quote() -> None:
    sections = [
        {"number": "0", "title": "Preamble", "start": 0, "end": DOC.index("2. TERM")},
        {"number": "2", "title": "Termination", "start": DOC.index("2. TERM"), "end": len(DOC)},
    ]
    page_two = DOC.index("3. LIABILITY")
    evidence = evidence_for(
        DOC,
        'limited to "USD 250,000"',
        value={"amount": 250000, "currency": "USD"},
        page_starts=(0, page_two),
        sections=sections,
    )
    assert evidence["supported"] is True and evidence["support"] == "supported"
    assert DOC[evidence["start"] : evidence["end"]] == "limited to \u201cUSD 250,000\u201d"
    assert (evidence["page"], evidence["section"], evidence["section_title"]) == (
        2,
        "2",
        "Termination",
    )


def test_evidence_of_an_invented_quote_is_unsupported_and_kept() -> None:
    evidence = evidence_for(
        DOC, "The cap is one billion dollars.", value=10**9, page_starts=(0,), sections=[]
    )
    assert evidence == {
        "quote": "The cap is one billion dollars.",
        "start": None,
        "end": None,
        "page": None,
        "section": None,
        "section_title": None,
        "supported": False,
        "support": "quote_not_found",
    }


def test_a_value_its_found_quote_does_not_hold_is_not_supported() -> None:
    """The party "7." case: a quote that is in the document (a clause number) supports
    only what can be read in it."""
    document = '7. LIABILITY\nThis Agreement is made between Acme Ltd ("Supplier") and Borealis.'
    for value in ({"name": "7.", "role": "Supplier"}, "Acme Ltd", 24, "2025-01-01", True):
        found = evidence_for(document, "7.", value=value, page_starts=(0,), sections=[])
        expected = "supported" if value is True else "value_not_in_quote"
        assert (found["start"], found["support"]) == (0, expected), value
        assert found["supported"] is (value is True)
        record = {"field": "parties", "value": value, **found}
        assert support_label(record) == (
            "supported" if value is True else "quote found, value not in it"
        )
    party = evidence_for(
        document,
        'between Acme Ltd ("Supplier")',
        value=[{"name": "ACME LIMITED", "role": "supplier"}],
        page_starts=(0,),
        sections=[],
    )
    assert party["supported"] is True


def record(field: str, support: str) -> dict[str, object]:
    quote = {"supported": "ninety (90) days' prior", "value_not_in_quote": "TERMINATION"}
    found = evidence_for(
        DOC, quote.get(support, "Nowhere."), value=90, page_starts=(0,), sections=[]
    )
    assert found["support"] == support
    return {"field": field, "value": 90, **found}


def test_unsupported_values_are_read_from_every_step_that_records_evidence() -> None:
    outputs = {
        "extract_sections": {"sections": []},
        "extract_fields": {
            "evidence": [
                record("term_months", "supported"),
                record("cap", "quote_not_found"),
                record("law", "value_not_in_quote"),
            ]
        },
        "summarize": {"summary": "x", "evidence": "not a list"},
        "own_data": {"evidence": [{"field": "x", "supported": False}, "text"]},  # not records
    }
    assert [r["field"] for r in evidence_records(outputs)] == ["term_months", "cap", "law"]
    assert unsupported_values(outputs) == [
        ("cap", Support.QUOTE_NOT_FOUND),
        ("law", Support.VALUE_NOT_IN_QUOTE),
    ]
    assert unsupported_values(outputs, only=Support.VALUE_NOT_IN_QUOTE) == [
        ("law", Support.VALUE_NOT_IN_QUOTE)
    ]


def test_a_record_made_before_support_existed_says_what_its_fields_do() -> None:
    legacy = {"field": "x", "value": 1, "quote": "q", "start": 0, "end": 1, "page": 1}
    assert support_of({**legacy, "supported": True}) is Support.SUPPORTED
    assert support_of({**legacy, "supported": False}) is Support.QUOTE_NOT_FOUND
    corrected = {**legacy, "supported": True, "corrected": True}
    assert support_of(corrected) is Support.CORRECTED
    assert support_label(corrected) == "corrected by a reviewer"
    assert support_label({**corrected, "corrected_by": "Ada"}) == "corrected by Ada"


BOX = {
    "page": 1,
    "left": 72.0,
    "top": 90.5,
    "right": 200,
    "bottom": 102.1,
    "page_width": 595.3,
    "page_height": 841.9,
}
RECORD = {
    "field": "term_months",
    "value": 24,
    "quote": "twenty-four (24) months",
    "start": 5,
    "end": 28,
    "page": 1,
    "section": "1",
    "section_title": "TERM",
    "supported": True,
}


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"start": None, "end": None, "page": None, "section": None, "supported": False},
        {"section_title": None},
        {"start": 5.0},
        {"extra": "kept"},
        {"value": None},
        {"start": -1},
        {"page": 0},
        {"start": True},
        {"end": "28"},
        {"start": 5.5},
        {"quote": "q" * (MAX_QUOTE_CHARS + 1)},
        {"field": 3},
        {"supported": "yes"},
        {"section": 1},
        {"section_title": 2},
        {"supported": None},
        {"boxes": []},
        {"boxes": [BOX]},
        {"boxes": "x"},
        {"boxes": [{"page": 1}]},
        {"boxes": [BOX | {"page": 0}]},
        {"boxes": [BOX | {"left": "1"}]},
        {"boxes": [BOX | {"page_width": 0}]},
        {"support": "value_not_in_quote", "supported": False},
        {"support": "maybe"},
        {"corrected": True, "corrected_by": "Ada", "model_quote": "q", "quote": ""},
        {"corrected": "yes"},
        {"corrected_by": 7},
        {"corrected_by": None},
        {"model_quote": "q" * (MAX_QUOTE_CHARS + 1)},
    ],
)
def test_the_records_kept_are_exactly_those_the_evidence_schema_allows(
    change: dict[str, object],
) -> None:
    record = RECORD | change
    expected = jsonschema.Draft202012Validator(EVIDENCE_SCHEMA).is_valid(record)
    assert bool(evidence_records({"s": {"evidence": [record]}})) == expected
    for name in EVIDENCE_SCHEMA["required"]:
        missing = {k: v for k, v in record.items() if k != name}
        assert evidence_records({"s": {"evidence": [missing]}}) == []


def test_a_spaced_dash_and_a_hyphen_copied_without_its_line_break_are_found() -> None:
    doc = "Term - Renewal\nThe Services are twenty-\nfour months long."
    assert located(doc, "Term Renewal") == "Term - Renewal"
    assert located(doc, "twenty-four months") == "twenty-\nfour months"


def test_every_sentence_of_a_sample_contract_reflowed_onto_one_line_is_found() -> None:
    text = sample_contracts(1)[0].text
    # Wrap the contract at 60 columns with words hyphenated at the line ends, as a PDF
    # extraction gives it; quotes come from the original sentences on one line.
    wrapped, column = [], 0
    for word in text.split(" "):
        if column + len(word) > 60 and len(word) > 6 and "\n" not in word:
            wrapped.append(word[:3] + "-\n" + word[3:])
            column = len(word) - 3
        else:
            wrapped.append(word)
            column = 0 if "\n" in word else column + len(word) + 1
    document = " ".join(wrapped)
    assert document.count("-\n") > 20
    sentences = [" ".join(s.split()) for s in re.split(r"(?<=\.)\s+", text) if len(s) > 20]
    assert len(sentences) > 50
    for sentence in sentences:
        located(document, sentence)


def test_a_word_boundary_is_judged_on_the_document_as_it_stands() -> None:
    # The hyphen before "30" is dropped when comparing, but it still ends the word before.
    doc = "Payment within 130 days, or in case x-30 days after notice."
    start, end = locate_quote(doc, "30 days after") or (0, 0)
    assert doc[start:end] == "30 days after"
    assert locate_quote("within 130 days", "30 days") is None


def test_a_span_to_look_in_that_ends_inside_the_quote_falls_back_to_the_whole_document() -> None:
    doc = "Notice: ninety (90) days. Later: ninety (90) days."
    first, second = doc.index("ninety"), doc.rindex("ninety")
    quote = "ninety (90) days"
    assert locate_quote(doc, quote, near=(second, len(doc))) == (second, second + len(quote))
    assert locate_quote(doc, quote, near=(second, second + 5)) == (first, first + len(quote))


# Words and the layout that normalisation sees through: spaces, line breaks and tabs, hyphens
# with or without a line break after them, soft hyphens, curly quotation marks.
_LAYOUT = st.sampled_from([" ", "  ", "\n", " \n\t", "-", "-\n", "\u00ad", "\u00ad ", " \u00ad "])
_MARK = st.sampled_from(["", '"', "'", "\u201c", "\u2019"])
_WORD_TEXT = st.tuples(_MARK, st.text(alphabet="ab1", min_size=1, max_size=3), _MARK).map("".join)


@given(st.lists(st.tuples(_WORD_TEXT, _LAYOUT), min_size=1, max_size=12), st.data())
@settings(max_examples=300, deadline=None)
def test_any_passage_between_word_boundaries_is_found_where_it_stands(
    pieces: list[tuple[str, str]], data: st.DataObject
) -> None:
    document = "".join(word + layout for word, layout in pieces)
    # Word ends in the document: a passage starts at one word and ends at a later one.
    starts = [m.start() for m in re.finditer(r"(?<![ab1])[ab1]", document)]
    ends = [m.end() for m in re.finditer(r"[ab1](?![ab1])", document)]
    assert starts  # every piece has a word character
    first = data.draw(st.sampled_from(starts))
    later = [e for e in ends if e > first]
    last = data.draw(st.sampled_from(later))
    passage = document[first:last]
    span = locate_quote(document, normalised(passage), near=(first, last))
    # The span the value was read from wins, so the passage is found where it stands.
    assert span == (first, last), (document, passage)


def test_a_span_to_look_in_may_start_inside_the_whitespace_before_the_quote() -> None:
    doc = "Notice: ninety days.\n\n\n   Notice: sixty days."
    second = doc.rindex("Notice")
    assert locate_quote(doc, "Notice", near=(second - 2, len(doc))) == (second, second + 6)
