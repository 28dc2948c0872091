"""Word files built to make a reader work far more than their size: each one a few KB (a
few hundred for the oversized part), each aimed at one way a DOCX's text multiplies or its
reading recurses. What each must end as is in :mod:`docpipe_dev.hostile.corpus`."""

from __future__ import annotations

import io
import random
import zipfile

from docpipe_dev.word_xml import footnotes, numbering, p, text_box, word_file

__all__ = [
    "deeply_nested_tables",
    "footnote_chain",
    "huge_grid_before",
    "huge_grid_span",
    "letter_numbering",
    "many_text_boxes",
    "merged_down",
    "oversized_part",
    "pages_of_merges",
    "self_referring_footnote",
    "spans_repeating_text",
    "symbol_past_unicode",
]


def _filler(chars: int, seed: int = 0) -> str:
    """``chars`` characters of words (compressible, as repeated clauses are)."""
    rng = random.Random(seed)
    words = ("term", "party", "notice", "fees", "clause", "agreement", "shall", "the")
    text = ""
    while len(text) < chars:
        text += rng.choice(words) + " "
    return text[:chars]


def huge_grid_span(span: int = 10**9) -> bytes:
    """One table cell that says it spans ``span`` grid columns (a Word table has at most
    63): a reader that repeats the cell's text per column asks for gigabytes."""
    cell = f'<w:tc><w:tcPr><w:gridSpan w:val="{span}"/></w:tcPr>{p("spanned")}</w:tc>'
    return word_file(f"<w:tbl><w:tr>{cell}</w:tr></w:tbl>")


def huge_grid_before(before: int = 10**9) -> bytes:
    """A row that starts ``before`` empty grid columns in."""
    row = f'<w:tr><w:trPr><w:gridBefore w:val="{before}"/></w:trPr><w:tc>{p("late")}</w:tc></w:tr>'
    return word_file(f"<w:tbl>{row}</w:tbl>")


def spans_repeating_text(rows: int = 12, span: int = 63, chars: int = 20_000) -> bytes:
    """Rows of one cell of ``chars`` characters spanning ``span`` columns, each within
    Word's own bounds: the text stands ``span`` times in every row, millions of characters
    from a file of a few KB."""
    cell = f'<w:tc><w:tcPr><w:gridSpan w:val="{span}"/></w:tcPr>{p(_filler(chars))}</w:tc>'
    return word_file("<w:tbl>" + f"<w:tr>{cell}</w:tr>" * rows + "</w:tbl>")


def merged_down(rows: int = 5_000, chars: int = 20_000) -> bytes:
    """A cell of ``chars`` characters merged down over ``rows`` rows: its text is read into
    every row it covers (100 M characters with the defaults, from a few KB)."""
    first = f'<w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr>{p(_filler(chars))}</w:tc>'
    below = "<w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc>"
    return word_file(f"<w:tbl><w:tr>{first}</w:tr>" + f"<w:tr>{below}</w:tr>" * rows + "</w:tbl>")


def letter_numbering(start: int = 260_000_000, items: int = 20) -> bytes:
    """A list numbered a, b, c ... that starts at ``start``: Word repeats the letter past
    z, so each label is ``start / 26`` letters long (10 M with the defaults)."""
    levels = (
        '<w:abstractNum w:abstractNumId="0"><w:lvl w:ilvl="0">'
        f'<w:start w:val="{start}"/><w:numFmt w:val="lowerLetter"/><w:lvlText w:val="%1)"/>'
        '</w:lvl></w:abstractNum><w:num w:numId="1"><w:abstractNumId w:val="0"/></w:num>'
    )
    item = p("an item", '<w:numPr><w:ilvl w:val="0"/><w:numId w:val="1"/></w:numPr>')
    return word_file(item * items, {"numbering.xml": numbering(levels)})


def _note_reference(note: int) -> str:
    return f'<w:r><w:footnoteReference w:id="{note}"/></w:r>'


def footnote_chain(depth: int = 40, references: int = 2) -> bytes:
    """Footnote 1 cites footnote 2 ``references`` times, which cites footnote 3 as often,
    ``depth`` deep: a reader that writes a note out again at each reference writes
    ``references ** depth`` notes."""
    notes = "".join(
        f'<w:footnote w:id="{n}"><w:p><w:r><w:t>note {n} </w:t></w:r>'
        + (_note_reference(n + 1) * references if n < depth else "")
        + "</w:p></w:footnote>"
        for n in range(1, depth + 1)
    )
    body = f"<w:p><w:r><w:t>cited</w:t></w:r>{_note_reference(1)}</w:p>"
    return word_file(body, {"footnotes.xml": footnotes(notes)})


def self_referring_footnote() -> bytes:
    """A footnote that cites itself: endless to a reader that follows references."""
    see = f"<w:p><w:r><w:t>see </w:t></w:r>{_note_reference(1)}</w:p>"
    note = f'<w:footnote w:id="1">{see}</w:footnote>'
    body = f"<w:p><w:r><w:t>cited</w:t></w:r>{_note_reference(1)}</w:p>"
    return word_file(body, {"footnotes.xml": footnotes(note)})


def oversized_part(megabytes: int = 18) -> bytes:
    """A footnotes part of ``megabytes`` MB of XML (parsed whole, lxml holds about 21 times
    its size), with an incompressible member beside it so that the zip stays within its
    expansion ratio and the part itself is what is too big."""
    note = '<w:footnote w:id="{}"><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:footnote>'
    size, notes, n = megabytes * 1_000_000, [], 0
    filler = _filler(200)
    while size > 0:
        notes.append(note.format(n + 2, filler))
        size -= len(notes[-1])
        n += 1
    body = f"<w:p><w:r><w:t>cited</w:t></w:r>{_note_reference(2)}</w:p>"
    data = word_file(body, {"footnotes.xml": footnotes("".join(notes))})
    noise = random.Random(megabytes).randbytes(megabytes * 20_000)  # ratio 50 at most
    return _with_stored_member(data, "word/media/noise.bin", noise)


def symbol_past_unicode() -> bytes:
    """A symbol (``w:sym``) whose character code is past any integer a C ``int`` holds."""
    run = '<w:r><w:t>before </w:t><w:sym w:font="Symbol" w:char="FFFFFFFFFFFFFFFFFFFFFFFF"/></w:r>'
    return word_file(f"<w:p>{run}</w:p>")


def pages_of_merges(pages: int = 500, rows: int = 150, chars: int = 500) -> bytes:
    """``pages`` pages, each a table whose first cell is merged down ``rows`` rows: a file
    of tens of KB whose whole reading takes long, and a reader that reads it all again at
    each delivery of its step, reading one page a time, never ends."""
    first = f'<w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr>{p(_filler(chars))}</w:tc>'
    below = "<w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc>"
    merged = f"<w:tbl><w:tr>{first}</w:tr>" + f"<w:tr>{below}</w:tr>" * rows + "</w:tbl>"
    page = f'{merged}<w:p><w:r><w:br w:type="page"/></w:r></w:p>'
    data = word_file(page * pages)
    # Its XML compresses a thousandfold: noise beside it keeps the zip within its ratio.
    noise = random.Random(pages).randbytes(len(page) * pages // 50)
    return _with_stored_member(data, "word/media/noise.bin", noise)


def many_text_boxes(count: int = 10_000) -> bytes:
    """A page of ``count`` small shapes, each with a word of its own: built to make a
    reader read and order ten thousand stories."""
    rng = random.Random(count)
    words = (
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8)) for _ in range(count)
    )
    return word_file("<w:p>" + "".join(text_box(w) for w in words) + "</w:p>")


def deeply_nested_tables(depth: int = 1000) -> bytes:
    """One cell holding a table whose cell holds a table ... ``depth`` tables deep."""
    opening, closing = "<w:tbl><w:tr><w:tc>" * depth, "</w:tc></w:tr></w:tbl>" * depth
    return word_file(f"{opening}{p('the innermost cell')}{closing}")


def _with_stored_member(data: bytes, name: str, content: bytes) -> bytes:
    buffer = io.BytesIO(data)
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_STORED) as archive:
        archive.writestr(name, content)
    return buffer.getvalue()
