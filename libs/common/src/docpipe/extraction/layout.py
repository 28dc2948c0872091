"""A page's words in reading order, from where they stand: columns column by column, tables
and forms row by row, sub- and superscripts in their line.

The input is :class:`Fragment` s, runs of characters that stood next to each other (a PDF
text layer gives them in the order they were drawn, which is not always the order they are
read). They are cut into horizontal *rows* (the vertical middles of their boxes overlap);
consecutive rows that leave the same wide vertical gap free (a gutter) form a *band*; a band
whose pieces either side of its gutters read like prose (several words a line, on several
lines) is read piece by piece, left to right, each top to bottom. Any other band is read row
by row, each row left to right: a table's cells stay on their row, a form's label beside its
value. This is a recursive XY cut specialised to what documents do; it needs nothing but the
boxes.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from docpipe.extraction.geometry import Box

__all__ = ["Fragment", "PageLayout", "PlacedWord", "lay_out"]

# The share of a fragment's height kept as its vertical middle when rows are found: lines
# whose boxes touch or overlap a little are still different rows.
_MIDDLE = 0.5
# A fragment less tall than this share of the page's text is a sub- or superscript (or a
# footnote's): it joins the row it overlaps by this share of its height.
_SMALL = 0.8
_ATTACHED = 0.25
# A gutter between columns is at least this many line heights wide (a space is a quarter);
# a row further below a band of columns than this many line heights does not join it.
_GUTTER = 1.0
_BAND_GAP = 2.0
# Fragments closer than this many line heights are one word (a glyph drawn on its own, a
# kerned pair); further apart they are separate words.
_TOUCHING = 0.1
# A piece either side of a gutter reads like prose with this many words a line on average,
# over at least this many lines.
_PROSE_WORDS = 3.0
_PROSE_LINES = 2
# Two lines further apart than this many line heights belong to different paragraphs.
_PARAGRAPH_GAP = 0.8


@dataclass(frozen=True)
class Fragment:
    """Characters that stood next to each other, with their box; ``spaced`` when a space
    came before them (they start a word, however close they stand to what is left of
    them); ``continues`` when the last of them broke the word at the line's end (the word
    goes on on the next line)."""

    text: str
    box: Box
    spaced: bool = False
    continues: bool = False

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]


@dataclass(frozen=True)
class PlacedWord:
    """A word of the page's text: ``text[start:end]``, and where it stands."""

    start: int
    end: int
    box: Box


@dataclass(frozen=True)
class PageLayout:
    text: str
    words: tuple[PlacedWord, ...] = ()


@dataclass
class _Line:
    fragments: list[Fragment]
    top: float = field(init=False)
    bottom: float = field(init=False)

    def __post_init__(self) -> None:
        self.top = min(f.box[1] for f in self.fragments)
        self.bottom = max(f.box[3] for f in self.fragments)


def lay_out(fragments: Sequence[Fragment]) -> PageLayout:
    """The page's text in reading order, with each word's place in it."""
    if not fragments:
        return PageLayout("")
    height = statistics.median(f.height for f in fragments) or 1.0
    left = min(f.box[0] for f in fragments)
    right = max(f.box[2] for f in fragments)
    lines: list[_Line] = []
    for band in _bands(_rows(fragments, height), (left, right), height):
        lines.extend(band)
    return _composed(lines, height)


def _rows(fragments: Sequence[Fragment], height: float) -> list[list[Fragment]]:
    """Fragments whose vertical middles overlap, top to bottom; one set smaller than the
    page's text (a sub- or superscript, a footnote mark) joins the row it overlaps most."""
    regular = [f for f in fragments if f.height >= _SMALL * height]
    rows = _rows_by_middles(regular)
    spans = [(min(f.box[1] for f in row), max(f.box[3] for f in row)) for row in rows]
    alone = []
    for small in (f for f in fragments if f.height < _SMALL * height):
        overlaps = [min(small.box[3], end) - max(small.box[1], top) for top, end in spans]
        best = max(range(len(rows)), key=overlaps.__getitem__, default=None)
        if best is not None and overlaps[best] > _ATTACHED * small.height:
            rows[best].append(small)
        else:
            alone.append(small)
    if alone:
        rows = sorted(rows + _rows_by_middles(alone), key=_top)
    return rows


def _rows_by_middles(fragments: Sequence[Fragment]) -> list[list[Fragment]]:
    rows: list[list[Fragment]] = []
    bottom = float("-inf")
    for fragment in sorted(fragments, key=_middle_top):
        top, end = _middle(fragment)
        if rows and top < bottom:
            rows[-1].append(fragment)
            bottom = max(bottom, end)
        else:
            rows.append([fragment])
            bottom = end
    return rows


def _middle(fragment: Fragment) -> tuple[float, float]:
    margin = fragment.height * (1 - _MIDDLE) / 2
    return fragment.box[1] + margin, fragment.box[3] - margin


def _middle_top(fragment: Fragment) -> float:
    return _middle(fragment)[0]


def _bands(
    rows: list[list[Fragment]], extent: tuple[float, float], height: float
) -> list[list[_Line]]:
    """The page's lines, band by band in reading order. A band of columns starts at a row
    with a wide gap between its words, takes the rows just above it that leave some of that
    gap free (a column may start lower than the other), and the rows below that do so and
    follow closely; any other row joins a band read row by row."""
    gutter = _GUTTER * height
    bands: list[list[_Line]] = []
    band: list[list[Fragment]] = []
    cuts: list[tuple[float, float]] = []  # empty: a band read row by row
    for row in rows:
        free = _free(row, extent, gutter)
        inner = [span for span in free if extent[0] < span[0] and span[1] < extent[1]]
        near = bool(band) and _top(row) <= _bottom(band[-1]) + _BAND_GAP * height
        if cuts and near and (shared := _intersection(cuts, free, gutter)):
            cuts = shared
        elif cuts or inner:
            above: list[list[Fragment]] = []
            if not cuts:
                # Rows read row by row so far that leave the gap free join the columns.
                while band and (
                    taken := _intersection(inner, _free(band[-1], extent, gutter), gutter)
                ):
                    if _top(above[0] if above else row) > _bottom(band[-1]) + _BAND_GAP * height:
                        break
                    above.insert(0, band.pop())
                    inner = taken
            if band:
                bands.append(_read(band, cuts, height))
            band, cuts = above, inner
        band.append(row)
    if band:
        bands.append(_read(band, cuts, height))
    return bands


def _top(row: list[Fragment]) -> float:
    return min(f.box[1] for f in row)


def _bottom(row: list[Fragment]) -> float:
    return max(f.box[3] for f in row)


def _free(
    row: list[Fragment], extent: tuple[float, float], gutter: float
) -> list[tuple[float, float]]:
    """The spans of the page's width that the row leaves empty, each at least ``gutter``."""
    spans, edge = [], extent[0]
    for fragment in sorted(row, key=lambda f: f.box[0]):
        if fragment.box[0] - edge >= gutter:
            spans.append((edge, fragment.box[0]))
        edge = max(edge, fragment.box[2])
    if extent[1] - edge >= gutter:
        spans.append((edge, extent[1]))
    return spans


def _intersection(
    a: list[tuple[float, float]], b: list[tuple[float, float]], gutter: float
) -> list[tuple[float, float]]:
    spans = [(max(x0, y0), min(x1, y1)) for x0, x1 in a for y0, y1 in b]
    return [(x0, x1) for x0, x1 in spans if x1 - x0 >= gutter]


def _read(
    rows: list[list[Fragment]], cuts: list[tuple[float, float]], height: float
) -> list[_Line]:
    """A band's lines: piece by piece when its gutters part prose columns, else row by row."""
    fragments = [f for row in rows for f in row]
    gutters = sorted(
        (x0, x1)
        for x0, x1 in cuts
        if any(f.box[2] <= x0 for f in fragments) and any(f.box[0] >= x1 for f in fragments)
    )
    if len(rows) >= _PROSE_LINES and gutters:
        pieces: list[list[Fragment]] = [[] for _ in range(len(gutters) + 1)]
        for fragment in fragments:
            pieces[sum(fragment.box[0] >= x1 for _, x1 in gutters)].append(fragment)
        columns = [[_Line(_in_order(row)) for row in _rows(piece, height)] for piece in pieces]
        if all(_prose(column) for column in columns):
            return [line for column in columns for line in column]
    return [_Line(_in_order(row)) for row in rows]


def _prose(lines: list[_Line]) -> bool:
    words = sum(len(_words(line.fragments)) for line in lines)
    return len(lines) >= _PROSE_LINES and words >= _PROSE_WORDS * len(lines)


def _in_order(row: list[Fragment]) -> list[Fragment]:
    return sorted(row, key=lambda f: f.box[0])


def _words(line: list[Fragment]) -> list[list[Fragment]]:
    """The line's fragments grouped into words: those that touch are one (a fragment drawn
    twice over itself, as fake bold does, counts once)."""
    words: list[list[Fragment]] = []
    for fragment in line:
        last = words[-1][-1] if words else None
        if (
            last is None
            or last.continues
            or fragment.spaced
            or fragment.box[0] - last.box[2] >= (_TOUCHING * max(last.height, fragment.height))
        ):
            words.append([fragment])
        elif not (fragment.text == last.text and _same_place(fragment.box, last.box)):
            words[-1].append(fragment)
    return words


def _same_place(a: Box, b: Box) -> bool:
    return abs(a[0] - b[0]) + abs(a[1] - b[1]) < 0.5 * (a[3] - a[1])


def _composed(lines: list[_Line], height: float) -> PageLayout:
    """The lines as text: words apart by a space, lines by a newline, paragraphs by a blank
    line; a word broken at a line's end goes on with the next line's first word."""
    parts: list[str] = []
    placed: list[PlacedWord] = []
    offset = 0
    previous: _Line | None = None
    carried = False
    for line in lines:
        words = _words(line.fragments)
        if previous is not None:
            separator = ""
            if not carried:
                paragraph = line.top - previous.bottom > _PARAGRAPH_GAP * height
                separator = "\n\n" if paragraph else "\n"
            parts.append(separator)
            offset += len(separator)
        for i, word in enumerate(words):
            if i:
                parts.append(" ")
                offset += 1
            text = "".join(f.text for f in word)
            placed.append(PlacedWord(offset, offset + len(text), _union(f.box for f in word)))
            parts.append(text)
            offset += len(text)
        carried = words[-1][-1].continues
        previous = line
    if carried:
        parts.append("-")  # broken at the page's end: the word goes on on the next page
    return PageLayout("".join(parts), tuple(placed))


def _union(boxes: Iterable[Box]) -> Box:
    lefts, tops, rights, bottoms = zip(*boxes, strict=True)
    return (min(lefts), min(tops), max(rights), max(bottoms))
