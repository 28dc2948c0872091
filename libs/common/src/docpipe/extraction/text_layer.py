"""A PDF page's text layer: PDFium's characters with their boxes, turned so that the page's
lines run left to right (its /Rotate, and a layer whose lines run down or up the page), then
laid out in reading order by :mod:`docpipe.extraction.layout`.

The order in which a PDF draws its glyphs is not always the order they are read in (two
columns drawn line by line across the page, an equation's glyphs one by one): only their
places tell. PDFium is asked for the boxes of each token's first and last character (about a
microsecond each); a token whose two ends do not stand like one word on one line is asked
character by character, and cut where its characters jump.
"""

from __future__ import annotations

import ctypes
import re
import unicodedata
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from docpipe.extraction.geometry import Box, turn_box
from docpipe.extraction.layout import Fragment, PageLayout, lay_out

__all__ = ["TextLayer", "read_text_layer"]

_Turn = Callable[[Box], Box]

# PDFium's mark for a hyphen that breaks a word at the end of a line.
_LINE_END_HYPHEN = "\ufffe"
# Runs of characters between spaces, line breaks, control characters and surrogate halves
# (a character outside the BMP is left out), each with the line-end hyphen that ends it.
_TOKEN = re.compile("[^\\s\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe]+\ufffe?|\ufffe")
# Ligatures as the letters they join ("ﬁ" -> "fi"), so that words are spelt as typed.
_LIGATURES = str.maketrans(
    {
        "\ufb00": "ff",
        "\ufb01": "fi",
        "\ufb02": "fl",
        "\ufb03": "ffi",
        "\ufb04": "ffl",
        "\ufb05": "st",
        "\ufb06": "st",
    }
)
# Characters further apart than this many heights (or on another line) are not one run
# (PDFium puts a space between words, so this is about glyphs placed out of order)...
_RUN_GAP = 0.5
# ... and a token wider than this many heights a character is not one word on one line.
_WIDEST_CHARACTER = 1.5
# How many tokens tell which way the lines run.
_DIRECTION_SAMPLE = 200


@dataclass(frozen=True)
class TextLayer:
    """The page's text in reading order and its words' places; ``rotation``: the degrees
    clockwise the page as shown (its /Rotate applied) was turned for its lines to run left
    to right; ``size``: the page's width and height in points, so turned."""

    layout: PageLayout
    rotation: int
    size: tuple[float, float]

    @property
    def words(self) -> Iterator[tuple[int, int, Box]]:
        """Each word's place in the text and its box, in points."""
        return ((w.start, w.end, w.box) for w in self.layout.words)


def read_text_layer(page: pdfium.PdfPage, *, check_chars: Callable[[int], None]) -> TextLayer:
    """The page's text layer read in reading order (an empty text when it has none);
    ``check_chars`` is given its number of characters before any of them is read (and
    raises to refuse a page that holds too many)."""
    x0, y0, x1, y1 = page.get_bbox()  # the crop box within the media box, inherited or not
    # Boxes stand on the page as stored (its crop box, y downwards) until turned: the turn
    # that makes the lines run left to right includes the /Rotate that shows the page.
    stored = (x1 - x0, y1 - y0)
    text_page = page.get_textpage()
    try:
        chars = _Characters(text_page, (x0, y1), check_chars)
        tokens = [m.span() for m in _TOKEN.finditer(chars.text)]
        turn = _turn_for(chars, tokens)
        fragments = _fragments(chars, tokens, lambda box: turn_box(box, stored, turn))
    finally:
        text_page.close()
    size = stored if turn in (0, 180) else (stored[1], stored[0])
    return TextLayer(lay_out(fragments), (turn - page.get_rotation()) % 360, size)


class _Characters:
    """A text page's characters: its text (one character per PDFium index) and each one's
    box, asked when needed."""

    def __init__(
        self,
        text_page: pdfium.PdfTextPage,
        origin: tuple[float, float],
        check_chars: Callable[[int], None],
    ) -> None:
        self._handle = text_page.raw  # (the helper object is converted again at every call)
        count = max(0, pdfium_c.FPDFText_CountChars(self._handle))
        check_chars(count)
        buffer = (ctypes.c_ushort * (count + 1))()
        if count:
            pdfium_c.FPDFText_GetText(self._handle, 0, count, buffer)
        self.text = "".join(map(chr, array("H", bytes(buffer)[: count * 2])))
        self._rect = pdfium_c.FS_RECTF()
        self._rect_ref = ctypes.byref(self._rect)
        self._origin = origin

    def spaced(self, start: int, end: int) -> bool:
        """Whether the characters from ``start`` to ``end`` hold a space of the PDF's own
        (not one PDFium put in)."""
        return any(
            self.text[i].isspace() and not pdfium_c.FPDFText_IsGenerated(self._handle, i)
            for i in range(max(start, 0), end)
        )

    def box(self, index: int) -> Box | None:
        """The character's box (left, top, right, bottom) from the crop box's top left;
        None when PDFium has none for it."""
        if not pdfium_c.FPDFText_GetLooseCharBox(self._handle, index, self._rect_ref):
            return None
        rect, (left, top) = self._rect, self._origin
        return (rect.left - left, top - rect.top, rect.right - left, top - rect.bottom)


def _turn_for(chars: _Characters, tokens: list[tuple[int, int]]) -> int:
    """The degrees clockwise that make most of the page's lines run left to right, from
    where its words' last characters stand from their first."""
    ways: Counter[int] = Counter()
    for start, end in tokens:
        if end - start < 2:
            continue
        first, last = chars.box(start), chars.box(end - 1)
        if first is None or last is None:
            continue
        dx = (last[0] + last[2] - first[0] - first[2]) / 2
        dy = (last[1] + last[3] - first[1] - first[3]) / 2
        if abs(dx) > abs(dy):
            ways[0 if dx > 0 else 180] += 1
        elif dy:
            ways[270 if dy > 0 else 90] += 1  # running down: turn a quarter anticlockwise
        if ways.total() >= _DIRECTION_SAMPLE:
            break
    return ways.most_common(1)[0][0] if ways else 0


def _fragments(chars: _Characters, tokens: list[tuple[int, int]], turned: _Turn) -> list[Fragment]:
    """Each token as a fragment, or as several where its characters jump."""
    fragments: list[Fragment] = []
    end_before, box_before = -1, None
    for start, end in tokens:
        continues = chars.text[end - 1] == _LINE_END_HYPHEN
        last_index = end - 2 if continues else end - 1
        if last_index < start:  # a line-end hyphen alone
            if fragments:
                fragments[-1] = replace(fragments[-1], continues=True)
            continue
        first, last = chars.box(start), chars.box(last_index)
        if first is None or last is None:
            cut = _cut(chars, start, last_index + 1, turned, False, continues)
        else:
            first, last = turned(first), turned(last)
            # A space of the PDF's own between two words read one after the other on a line
            # parts them however close they stand (wide glyphs' boxes overlap it); a space
            # PDFium put in (between glyphs drawn out of order, at a change of size) does not.
            spaced = (
                box_before is not None
                and chars.spaced(end_before, start)
                and _next(box_before, first)
            )
            if _one_word(first, last, last_index - start + 1):
                text = _spelt(chars.text[start : last_index + 1])
                cut = [Fragment(text, _union(first, last), spaced, continues)]
            else:
                cut = _cut(chars, start, last_index + 1, turned, spaced, continues)
        fragments.extend(cut)
        end_before, box_before = end, cut[-1].box if cut else None
    return fragments


def _next(before: Box, box: Box) -> bool:
    """Whether ``box`` stands after ``before`` on its line, as the next word would."""
    height = max(before[3] - before[1], box[3] - box[1], 0.1)
    same_line = min(before[3], box[3]) > max(before[1], box[1])
    return same_line and before[0] < box[0] and box[0] - before[2] < 3 * height


def _one_word(first: Box, last: Box, length: int) -> bool:
    """Whether a token's first and last characters stand like one word on one line."""
    height = max(first[3] - first[1], last[3] - last[1], 0.1)
    same_line = min(first[3], last[3]) > max(first[1], last[1])
    return (
        same_line
        and first[0] <= last[0]
        and last[2] - first[0] <= (_WIDEST_CHARACTER * height * length)
    )


def _cut(
    chars: _Characters, start: int, end: int, turned: _Turn, spaced: bool, continues: bool
) -> list[Fragment]:
    """A token asked character by character, cut wherever the next character does not stand
    to the right of the one before, on its line, without a gap."""
    runs: list[tuple[list[str], list[Box]]] = []
    for index in range(start, end):
        box = chars.box(index)
        if box is None:
            continue
        box = turned(box)
        if runs:
            last = runs[-1][1][-1]
            reach = _RUN_GAP * max(last[3] - last[1], box[3] - box[1], 0.1)
            same_line = min(last[3], box[3]) > max(last[1], box[1])
            if same_line and -reach <= box[0] - last[2] <= reach:
                runs[-1][0].append(chars.text[index])
                runs[-1][1].append(box)
                continue
        runs.append(([chars.text[index]], [box]))
    last_run = len(runs) - 1
    return [
        Fragment(
            _spelt("".join(text)), _union(*boxes), spaced and i == 0, continues and i == last_run
        )
        for i, (text, boxes) in enumerate(runs)
    ]


def _spelt(text: str) -> str:
    return unicodedata.normalize("NFC", text.translate(_LIGATURES))


def _union(*boxes: Box) -> Box:
    lefts, tops, rights, bottoms = zip(*boxes, strict=True)
    return (min(lefts), min(tops), max(rights), max(bottoms))
