"""List numbers and bullets as Word shows them ("1.", "a)", "2.1", "•"), from numbering.xml.

A paragraph is a list item through its own ``w:numPr`` or its style's (styles inherit
through ``w:basedOn``). Its label is the level's ``w:lvlText`` with each ``%n`` replaced by
level n's counter in that level's format. Counters follow Word: lists (``w:num``) that share
an abstract definition continue one another unless one restarts (``w:startOverride``), and
an item resets the counters of the levels below it.

Bounded: a label longer than ``MAX_LABEL_CHARS`` (a number of millions in a, b, c ... format
is that many letters over 26) is ``too_complex``; no label is built past it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lxml import etree

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.word.package import W, too_complex

__all__ = ["MAX_LABEL_CHARS", "Numbering", "format_number"]

# Word's list numbers stop at 32767, which is 1,261 letters in a, b, c ... numbering: a
# longer label is no list's.
MAX_LABEL_CHARS = 1300
_LEVELS = 9
_PLACEHOLDER = re.compile(r"%([1-9])")
_ROMAN = (
    (1000, "m"),
    (900, "cm"),
    (500, "d"),
    (400, "cd"),
    (100, "c"),
    (90, "xc"),
    (50, "l"),
    (40, "xl"),
    (10, "x"),
    (9, "ix"),
    (5, "v"),
    (4, "iv"),
    (1, "i"),
)
# Bullets drawn from symbol fonts are private-use code points there; "o" in Courier New is
# Word's hollow bullet. Other bullet characters are shown as they are.
_BULLET_GLYPHS = {"o": "◦", "\uf0a7": "▪", "\uf0d8": "➢", "\uf0fc": "✓", "\uf076": "❖"}


def format_number(value: int, fmt: str) -> str:
    """``value`` in a ``w:numFmt`` (decimal for the formats Word spells out in words)."""
    if fmt in ("lowerLetter", "upperLetter"):
        # a..z, then aa..zz, then aaa...: Word repeats the letter.
        repeat = (value - 1) // 26 + 1 if value > 0 else 0
        if repeat > MAX_LABEL_CHARS:
            raise _too_long(f"{value} in {fmt} numbering is {repeat} letters")
        letter = chr(ord("a") + (value - 1) % 26) * repeat
        return letter.upper() if fmt == "upperLetter" else letter
    if fmt in ("lowerRoman", "upperRoman") and 0 < value < 4000:
        roman = ""
        for amount, digits in _ROMAN:
            count, value = divmod(value, amount)
            roman += digits * count
        return roman.upper() if fmt == "upperRoman" else roman
    if fmt == "decimalZero":
        return f"{value:02d}"
    if fmt == "none":
        return ""
    return str(value)


@dataclass(frozen=True)
class _Level:
    fmt: str = "decimal"
    text: str = "%1."
    start: int = 1
    legal: bool = False  # w:isLgl: every level's number in decimal
    style: str | None = None  # w:pStyle: the paragraph style that uses this level


@dataclass
class _List:
    levels: dict[int, _Level]
    counter_key: str  # lists with the same key count together
    starts: dict[int, int] = field(default_factory=dict)  # w:startOverride per level


class Numbering:
    """The labels of a document's list items, given in reading order (each call counts)."""

    def __init__(self, numbering: etree._Element | None, styles: etree._Element | None) -> None:
        self._lists: dict[str, _List] = {}
        self._style_numbering: dict[str, tuple[str | None, int | None]] = {}
        self._counters: dict[str, list[int | None]] = {}
        if styles is not None:
            self._read_styles(styles)
        if numbering is not None:
            self._read_numbering(numbering)

    def label(self, paragraph_properties: etree._Element | None) -> str:
        """The item's label ("" for a paragraph that is no list item), counted."""
        num_id, level = self._numbering_of(paragraph_properties)
        found = self._lists.get(num_id or "")
        if found is None:
            return ""
        definition = found.levels.get(level)
        if definition is None:
            return ""
        counters = self._counters.setdefault(found.counter_key, [None] * _LEVELS)
        current = counters[level]
        counters[level] = (
            found.starts.get(level, definition.start) if current is None else current + 1
        )
        for deeper in range(level + 1, _LEVELS):
            counters[deeper] = None
        if definition.fmt == "bullet":
            text = _bullet(definition.text)
        else:
            written = [len(definition.text)]

            def number(match: re.Match[str]) -> str:
                at = int(match.group(1)) - 1
                shown = found.levels.get(at, _Level())
                value = counters[at]
                if value is None:
                    value = found.starts.get(at, shown.start)
                shown_number = format_number(value, "decimal" if definition.legal else shown.fmt)
                written[0] += len(shown_number)
                if written[0] > MAX_LABEL_CHARS:
                    raise _too_long(f"the label {definition.text[:50]!r} runs past it")
                return shown_number

            text = _PLACEHOLDER.sub(number, definition.text)
        # A space even where w:suff says "nothing": Word then usually indents the text
        # away from its number, and "1.Services" would read as one word.
        return text + " " if text else text

    def _numbering_of(self, properties: etree._Element | None) -> tuple[str | None, int]:
        if properties is None:
            return None, 0
        style = _val(properties.find(W + "pStyle"))
        style_num, style_level = self._style_numbering.get(style or "", (None, None))
        num_pr = properties.find(W + "numPr")
        num_id = _val(num_pr.find(W + "numId")) if num_pr is not None else None
        level_text = _val(num_pr.find(W + "ilvl")) if num_pr is not None else None
        num_id = num_id if num_id is not None else style_num
        if num_id in (None, "0"):  # numId 0 switches a style's numbering off
            return None, 0
        level = _int(level_text, style_level if style_level is not None else -1)
        if level < 0:  # the style's own level, where numbering.xml ties one to it
            found = self._lists.get(num_id or "")
            level = next(
                (i for i, lvl in (found.levels.items() if found else ()) if lvl.style == style), 0
            )
        return num_id, min(max(level, 0), _LEVELS - 1)

    def _read_styles(self, styles: etree._Element) -> None:
        own: dict[str, tuple[str | None, int | None, str | None]] = {}
        for style in styles.iter(W + "style"):
            style_id = style.get(W + "styleId")
            if not style_id:
                continue
            num_pr = style.find(f"{W}pPr/{W}numPr")
            num_id = _val(num_pr.find(W + "numId")) if num_pr is not None else None
            level_text = _val(num_pr.find(W + "ilvl")) if num_pr is not None else None
            own[style_id] = (
                num_id,
                None if level_text is None else _int(level_text, 0),
                _val(style.find(W + "basedOn")),
            )
        for style_id, (style_num, style_level, parent) in own.items():
            seen = {style_id}
            while style_num is None and parent is not None and parent in own and parent not in seen:
                seen.add(parent)
                style_num, style_level, parent = own[parent]
            if style_num is not None:
                self._style_numbering[style_id] = (style_num, style_level)

    def _read_numbering(self, numbering: etree._Element) -> None:
        abstract = {
            a.get(W + "abstractNumId", ""): _levels(a) for a in numbering.iter(W + "abstractNum")
        }
        for num in numbering.iter(W + "num"):
            num_id = num.get(W + "numId")
            abstract_id = _val(num.find(W + "abstractNumId")) or ""
            if not num_id or abstract_id not in abstract:
                continue
            levels, starts = dict(abstract[abstract_id]), {}
            for override in num.iter(W + "lvlOverride"):
                level = _int(override.get(W + "ilvl"), 0)
                start = _val(override.find(W + "startOverride"))
                if start is not None:
                    starts[level] = _int(start, 1)
                replaced = override.find(W + "lvl")
                if replaced is not None:
                    levels[level] = _level(replaced)
            key = f"num:{num_id}" if starts else f"abstract:{abstract_id}"
            self._lists[num_id] = _List(levels, key, starts)


def _too_long(what: str) -> UnreadableDocumentError:
    return too_complex(f"a list label longer than {MAX_LABEL_CHARS} characters: {what}")


def _bullet(text: str) -> str:
    if not text or any("\ue000" <= c <= "\uf8ff" for c in text):
        return _BULLET_GLYPHS.get(text, "•")
    return _BULLET_GLYPHS.get(text, text)


def _levels(abstract: etree._Element) -> dict[int, _Level]:
    return {_int(lvl.get(W + "ilvl"), 0): _level(lvl) for lvl in abstract.iter(W + "lvl")}


def _level(lvl: etree._Element) -> _Level:
    fmt = _val(lvl.find(W + "numFmt")) or "decimal"
    if lvl.find(W + "lvlPicBulletId") is not None:
        fmt = "bullet"
    text = _val(lvl.find(W + "lvlText"))
    legal = lvl.find(W + "isLgl")
    return _Level(
        fmt=fmt,
        text="" if text is None else text,
        start=_int(_val(lvl.find(W + "start")), 1),
        legal=legal is not None and legal.get(W + "val") not in ("0", "false", "off"),
        style=_val(lvl.find(W + "pStyle")),
    )


def _val(element: etree._Element | None) -> str | None:
    return None if element is None else element.get(W + "val")


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default
