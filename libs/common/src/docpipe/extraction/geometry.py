"""Where words are on a page: boxes as (left, top, right, bottom) in PDF points, origin at
the top left, y growing downwards, on the page as it is read upright (its /Rotate and the
turn orientation detection found applied: the page image is rendered the same way).

A page's geometry is kept with its memo in PostgreSQL, compactly: the page's size and, per
word, where it is in the page's text and its box, rounded to a tenth of a point, at most
:data:`MAX_WORDS` of them (neighbours on a line are merged past that).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_WORDS", "Box", "PageGeometry", "turn_box"]

Box = tuple[float, float, float, float]
# A page of small print has a few thousand words; more are merged, so that a page's
# geometry stays under a few hundred kilobytes.
MAX_WORDS = 5000
# Two words are on one line when their boxes overlap vertically by this share of the
# smaller one.
_SAME_LINE = 0.5


def turn_box(box: Box, size: tuple[float, float], degrees: int) -> Box:
    """``box`` on a page of ``size`` (width, height) as it is after the page is turned
    ``degrees`` clockwise (0, 90, 180 or 270)."""
    left, top, right, bottom = box
    width, height = size
    if degrees == 90:
        return (height - bottom, left, height - top, right)
    if degrees == 180:
        return (width - right, height - bottom, width - left, height - top)
    if degrees == 270:
        return (top, width - right, bottom, width - left)
    return box


@dataclass(frozen=True)
class PageGeometry:
    """A page's size (points) and its words: ``(start, end, box)`` with ``text[start:end]``
    the word in the page's text, in text order."""

    width: float
    height: float
    words: tuple[tuple[int, int, Box], ...]

    @classmethod
    def of(
        cls, size: tuple[float, float], words: Iterable[tuple[int, int, Box]], *, scale: float = 1.0
    ) -> PageGeometry:
        """The geometry of words whose boxes are in units ``scale`` points each (pixels of
        an image rendered at ``72 / scale`` dpi), bounded to :data:`MAX_WORDS`."""
        placed = [(s, e, _scaled(box, scale)) for s, e, box in words]
        while len(placed) > MAX_WORDS:
            merged = _merged_pairs(placed)
            if len(merged) == len(placed):
                placed = placed[:MAX_WORDS]
                break
            placed = merged
        width, height = size
        return cls(round(width * scale, 1), round(height * scale, 1), tuple(placed))

    def as_json(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "height": self.height,
            "words": [[s, e, *box] for s, e, box in self.words],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PageGeometry:
        words = tuple(
            (int(w[0]), int(w[1]), (float(w[2]), float(w[3]), float(w[4]), float(w[5])))
            for w in data["words"]
        )
        return cls(float(data["width"]), float(data["height"]), words)

    def boxes(self, start: int, end: int) -> list[Box]:
        """The boxes of the words that ``[start, end)`` of the page's text touches, one per
        line: a passage over three lines has three."""
        lines: list[Box] = []
        for word_start, word_end, box in self.words:
            if word_end <= start or word_start >= end:
                continue
            if lines and _same_line(lines[-1], box) and box[0] >= lines[-1][0]:
                last = lines[-1]
                lines[-1] = (
                    last[0],
                    min(last[1], box[1]),
                    max(last[2], box[2]),
                    max(last[3], box[3]),
                )
            else:
                lines.append(box)
        return lines


def _scaled(box: Box, scale: float) -> Box:
    left, top, right, bottom = box
    return (
        round(left * scale, 1),
        round(top * scale, 1),
        round(right * scale, 1),
        round(bottom * scale, 1),
    )


def _same_line(a: Box, b: Box) -> bool:
    overlap = min(a[3], b[3]) - max(a[1], b[1])
    return overlap >= _SAME_LINE * min(a[3] - a[1], b[3] - b[1])


def _merged_pairs(words: Sequence[tuple[int, int, Box]]) -> list[tuple[int, int, Box]]:
    """Each word merged with the next one when they stand on one line."""
    merged: list[tuple[int, int, Box]] = []
    i = 0
    while i < len(words):
        if i + 1 < len(words) and _same_line(words[i][2], words[i + 1][2]):
            (start, _, a), (_, end, b) = words[i], words[i + 1]
            merged.append(
                (start, end, (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])))
            )
            i += 2
        else:
            merged.append(words[i])
            i += 1
    return merged
