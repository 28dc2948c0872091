"""Finding the numbered section headings of a contract, the way the extract_sections step does."""

from __future__ import annotations

import re
from typing import TypedDict

__all__ = ["Section", "find_sections", "title_case"]

# A heading is a line of its own: a number, a dot, then an upper-case title ("7. FEES AND
# PAYMENT"). Clause numbers such as "7.1 The Customer ..." never match: no space after the dot.
_HEADING = re.compile(r"^[ \t]*(\d{1,3})\.[ \t]+([A-Z][A-Z0-9 ,;&'()/\-]{1,80}?)[ \t]*$", re.M)
_SMALL_WORDS = frozenset(
    {"a", "an", "and", "as", "at", "by", "for", "in", "of", "on", "or", "the", "to", "with"}
)


class Section(TypedDict):
    number: str
    title: str
    heading: str


def find_sections(text: str) -> list[Section]:
    """Return every numbered heading, in order, with ``heading`` exactly as written."""
    return [
        Section(number=match[1], title=title_case(match[2]), heading=match[0].strip())
        for match in _HEADING.finditer(text)
    ]


def title_case(upper: str) -> str:
    """Return ``FEES AND PAYMENT`` as ``Fees and Payment``."""
    words = upper.lower().split()
    return " ".join(
        word if position and word in _SMALL_WORDS else _capitalize(word)
        for position, word in enumerate(words)
    )


def _capitalize(word: str) -> str:
    return "-".join(part[:1].upper() + part[1:] for part in word.split("-"))
