"""How much of a document's expected text an extraction has: word recall, the share of the
expected words (counted with multiplicity) found in the extracted text.

Words are runs of letters and digits, compared case-blind; the expected text is Markdown,
whose markup is not text: HTML comments (``<!-- image -->``) are dropped, and emphasis,
headings, list bullets and table pipes are no words anyway. A list's numbers ("1.") and a
footnote's mark are words a reader sees, so they count.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["markdown_words", "text_words", "word_recall"]

_WORD = re.compile(r"[^\W_]+")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def text_words(text: str) -> Counter[str]:
    return Counter(word.casefold() for word in _WORD.findall(text))


def markdown_words(markdown: str) -> Counter[str]:
    return text_words(_HTML_COMMENT.sub(" ", markdown))


def word_recall(expected_markdown: str, extracted: str) -> float:
    """The share of the expected words the extracted text has (1.0 for nothing expected)."""
    expected = markdown_words(expected_markdown)
    total = sum(expected.values())
    if not total:
        return 1.0
    return sum((expected & text_words(extracted)).values()) / total
