"""The hostile corpus: every hostile file docpipe_dev.hostile makes, with the attack it is
and what reading it must end as. ``kind`` is the documented kind it fails with
(docpipe.extraction.UNREADABLE_KINDS), or None for a file docpipe now reads within its
bounds (what was a crash is a document).

Each entry is built by calling ``make()``: a few KB to a few hundred KB (the zips of many
members: 44 MB, under the upload limit), made in about a second at most; nothing is kept on
disk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from docpipe_dev.hostile import image, pdf, word, zips

__all__ = ["CORPUS", "HostileFile"]


@dataclass(frozen=True)
class HostileFile:
    name: str
    fmt: str  # "pdf", "docx", "png", "jpeg" or "tiff"
    attack: str  # what it does to a reader that does not bound it
    kind: str | None  # what reading it ends as: an unreadable kind, or None: it reads
    make: Callable[[], bytes]
    at_upload: bool = False  # the API refuses it at upload (422 naming the kind)
    # What it may end as instead where the machine is too slow for ``kind``'s bound to be
    # met first: the time bound then meets it (PDFium lays a page's text out before its
    # characters can be counted).
    or_kind: str | None = None


CORPUS: tuple[HostileFile, ...] = (
    HostileFile(
        "huge-grid-span",
        "docx",
        "a cell spanning 10^9 columns: its text repeated per column, gigabytes",
        "too_complex",
        word.huge_grid_span,
    ),
    HostileFile(
        "huge-grid-before",
        "docx",
        "a row starting 10^9 columns in",
        "too_complex",
        word.huge_grid_before,
    ),
    HostileFile(
        "spans-repeating-text",
        "docx",
        "cells within Word's 63 columns whose spans repeat 20,000 characters each",
        "too_much_text",
        word.spans_repeating_text,
    ),
    HostileFile(
        "merged-down",
        "docx",
        "a cell merged down 5,000 rows: 100 M characters from 5 KB",
        "too_much_text",
        word.merged_down,
    ),
    HostileFile(
        "letter-numbering",
        "docx",
        "a list in a, b, c ... starting at 2.6 x 10^8: labels of 10 M letters",
        "too_complex",
        word.letter_numbering,
    ),
    HostileFile(
        "footnote-chain",
        "docx",
        "each footnote cites the next twice, 40 deep: 2^40 notes if each is written per reference",
        None,
        word.footnote_chain,
    ),
    HostileFile(
        "self-referring-footnote",
        "docx",
        "a footnote that cites itself: endless recursion",
        None,
        word.self_referring_footnote,
    ),
    HostileFile(
        "oversized-part",
        "docx",
        "an 18 MB footnotes part (lxml would hold hundreds of MB)",
        "too_complex",
        word.oversized_part,
    ),
    HostileFile(
        "symbol-past-unicode",
        "docx",
        "a symbol whose code is past any C integer: OverflowError",
        None,
        word.symbol_past_unicode,
    ),
    HostileFile(
        "pages-of-merges",
        "docx",
        "500 pages of merged cells: a long reading repeated at every delivery of its step",
        "too_much_text",
        word.pages_of_merges,
    ),
    HostileFile(
        "many-text-boxes",
        "docx",
        "ten thousand shapes, each a story of its own",
        "too_complex",
        word.many_text_boxes,
    ),
    HostileFile(
        "tables-a-thousand-deep",
        "docx",
        "tables nested a thousand deep",
        "too_complex",
        word.deeply_nested_tables,
    ),
    HostileFile(
        "huge-page",
        "pdf",
        "a page 720,000 points square without text: OCR would draw it at 1 dpi into 100 M pixels",
        "page_too_large",
        pdf.huge_page,
    ),
    HostileFile(
        "text-flood",
        "pdf",
        "a page whose text layer holds 2 M characters, from 7 KB",
        "too_much_text",
        pdf.text_flood,
        or_kind="too_slow",
    ),
    HostileFile(
        "slow-scan",
        "pdf",
        "a 50 KB page without text that draws a 20,000-pixel-square image 200 times: minutes "
        "for the OCR's render",
        "too_slow",
        pdf.slow_to_render_scan,
    ),
    HostileFile(
        "slow-every-stage",
        "pdf",
        "a text layer of no real words over the slow scan's image: the text read and judged, "
        "then minutes to draw for OCR, the stages' own limits adding up past the step's",
        "too_slow",
        pdf.slow_at_every_stage,
    ),
    HostileFile(
        "many-members",
        "docx",
        "a 44 MB zip whose directory lists 700,000 members: seconds for zipfile to list",
        "decompression_bomb",
        lambda: zips.many_members(700_000),
        at_upload=True,
    ),
    HostileFile(
        "many-members-lying",
        "docx",
        "the same, its end record declaring 5 members",
        "decompression_bomb",
        lambda: zips.many_members(700_000, declared=5),
        at_upload=True,
    ),
    HostileFile(
        "png-bomb",
        "png",
        "a black-and-white PNG of 900 M pixels in 110 KB (PIL itself refuses it)",
        "decompression_bomb",
        image.png_bomb,
        at_upload=True,
    ),
    HostileFile(
        "png-grey-flood",
        "png",
        "a grey PNG of 100 M pixels, 100 MB decoded, in 100 KB (within PIL's own limit)",
        "decompression_bomb",
        image.png_grey_flood,
        at_upload=True,
    ),
    HostileFile(
        "tiff-many-pages",
        "tiff",
        "a TIFF of 600 one-pixel pages",
        "too_many_pages",
        image.tiff_of_many_pages,
        at_upload=True,
    ),
)
