"""Reading contract fields out of one section's text, the way the extract_fields step does.

Each reader looks only at sentences whose wording makes the fact unambiguous, and skips the
look-alikes that contracts are full of: cure periods next to termination notices, renewal
periods next to the initial term, insurance limits next to liability caps, instalments next
to the total value. A field that the text does not state is left out, never guessed.

Each value comes with its quote: the passage it was read from, copied as a model copies text
(on one line, a word hyphenated at a line end joined again), so the quote is in the text but
rarely character for character.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from typing import Any

__all__ = ["MAX_QUOTE_CHARS", "read_fields", "read_quoted_fields"]

MAX_QUOTE_CHARS = 1000  # what docpipe's extract_fields step accepts
_LINE_END_HYPHEN = re.compile(r"(?<=[a-z])-\s*\n\s*(?=[a-z])")

_Read = tuple[Any, str]  # (value, the passage it was read from)

_MONTHS = {
    name: number
    for number, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ),
        start=1,
    )
}
_MONTH = "(" + "|".join(_MONTHS) + ")"
_DATE = re.compile(
    rf"\b{_MONTH}\s+(\d{{1,2}}),?\s+(\d{{4}})\b"  # March 3, 2025
    rf"|\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:day\s+of\s+)?{_MONTH},?\s+(\d{{4}})\b",  # 3 March 2025
    re.I,
)
_NUMBER = r"(\d{1,3}(?:,\d{3})+(?:\.\d{1,2})?|\d+(?:\.\d{1,2})?)"
_MONEY = re.compile(
    rf"(US\$|USD|EUR|GBP|\$|€|£)\s?{_NUMBER}"
    rf"|{_NUMBER}\s?(USD|EUR|GBP|US dollars|euros?|pounds sterling)\b"
)
_CURRENCIES = {
    "$": "USD",
    "us$": "USD",
    "usd": "USD",
    "us dollars": "USD",
    "€": "EUR",
    "eur": "EUR",
    "euro": "EUR",
    "euros": "EUR",
    "£": "GBP",
    "gbp": "GBP",
    "pounds sterling": "GBP",
}

# A line break inside a paragraph (not a blank line, not before a numbered clause or an
# all-caps heading, which the text files put on lines of their own).
_LINE_WRAP = re.compile(r"[ \t]*\n[ \t]*(?!\s|\d+(?:\.\d+)*\s|[A-Z][A-Z ;,&-]+\n)")
_SENTENCE_BREAK = re.compile(r"[.;:]\s+(?=[A-Z(\"])|\n\s*\n")
_TITLE_LINE = re.compile(r"^[A-Z][A-Z ,&\-]*\b(?:AGREEMENT|CONTRACT)\b[A-Z ]*$")
_AGREEMENT_NAME = re.compile(
    r"\bthis\s+([A-Z][\w\- ]*?(?:Agreement|Contract))\s+\((?:the|this)\s+\"Agreement\"\)", re.I
)
_ROLE = re.compile(r"\(\s*[\"\u201c]([^\"\u201d]{1,40})[\"\u201d]\s*\)")
_NOT_ROLES = frozenset({"agreement", "effective date", "party", "parties"})
_BETWEEN = re.compile(r"\b(?:by and )?between\s+", re.I)
_EFFECTIVE_DATE = re.compile(r"\(\s*the\s+[\"\u201c]Effective Date[\"\u201d]\s*\)", re.I)

_DURATION = re.compile(r"\(?(\d{1,3})\)?\s+(months?|years?)\b", re.I)
_TERM_CONTEXT = ("initial term", "term of this agreement", "remain in force", "continue for")
_NOTICE = re.compile(
    r"\(?(\d{1,3})\)?\s+(?:calendar\s+|business\s+)?days?['\u2019]?\s+(?:prior\s+|advance\s+)?"
    r"(?:written\s+)?notice",
    re.I,
)
_CAUSED_TERMINATION = ("breach", "insolven", "remedy", " cure", "renew")
_PAYMENT_DAYS = re.compile(r"\bnet\s+(\d{1,3})\b|\(?(\d{1,3})\)?\s+days?\b", re.I)
_VALUE_CONTEXT = ("total", "aggregate", "contract value", "commitment", "consideration", "sum of")
_NOT_VALUE = ("liab", "insur", "instal")
_CAP_CONTEXT = ("exceed", "limited to", "capped", " cap ")
_YEARS = re.compile(r"\(?(\d{1,2})\)?\s+years?\b", re.I)
_GOVERNING_LAW = re.compile(
    r"\bgoverned\s+by\s+(?:and\s+construed\s+in\s+accordance\s+with\s+)?the\s+laws?\s+of\s+"
    r"(?:the\s+)?([A-Z][A-Za-z .'\-]*?)(?=\s*[,.;]|\s+without\b|\s+excluding\b|\s*$)"
    r"|\bthe\s+laws\s+of\s+(?:the\s+)?([A-Z][A-Za-z .'\-]*?)\s+(?:shall\s+)?govern",
    re.I,
)
_NO_RENEWAL = re.compile(
    r"\b(?:shall|will|does|do)\s+not\s+(?:be\s+)?(?:automatically\s+)?renew"
    r"|\bno\s+automatic(?:al)?\s+renewal|\bnot\s+renew\s+automatically",
    re.I,
)
_RENEWAL = re.compile(
    r"\b(?:automatically|auto-)\s?renew|\brenews?\s+automatically|\bautomatic\s+renewal", re.I
)


class _Text:
    """One section's text with its lower-cased copy and, computed on demand, its sentences.

    Every reader first checks the lower-cased text for a plain keyword: most sections state
    no fact, and substring tests are far cheaper than running each regex over them.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.lowered = text.lower()

    @cached_property
    def sentences(self) -> list[tuple[str, str]]:
        """(sentence, lower-cased sentence) pairs."""
        return [(s, s.lower()) for s in _SENTENCE_BREAK.split(self.text) if s.strip()]

    def sentences_with(self, *keywords: str) -> list[tuple[str, str]]:
        if not any(keyword in self.lowered for keyword in keywords):
            return []
        return [pair for pair in self.sentences if any(k in pair[1] for k in keywords)]


def read_fields(section_text: str) -> dict[str, Any]:
    """Return the schema fields that this section states, in schema order; never a null."""
    return {name: read["value"] for name, read in read_quoted_fields(section_text).items()}


def read_quoted_fields(section_text: str) -> dict[str, dict[str, Any]]:
    """``{field: {"value", "quote"}}`` for the fields this section states, in schema order.

    It reads paragraphs, not lines, as a model does: a PDF's text wraps a sentence over
    several lines ("the Effective\nDate") where the text file has it on one."""
    text = _Text(_LINE_WRAP.sub(" ", _LINE_END_HYPHEN.sub("", section_text)))
    fields: dict[str, dict[str, Any]] = {}
    for name, reader in _READERS:
        read = reader(text)
        if read is not None:
            fields[name] = {"value": read[0], "quote": _copied(read[1])}
    return fields


def _copied(passage: str) -> str:
    """``passage`` as a model quotes it: on one line, line-end hyphenation undone."""
    quote = " ".join(_LINE_END_HYPHEN.sub("", passage).split())
    # A long passage is quoted up to its last whole word that fits.
    if len(quote) <= MAX_QUOTE_CHARS:
        return quote
    return quote[: MAX_QUOTE_CHARS + 1].rsplit(" ", 1)[0]


def _parties(text: _Text) -> _Read | None:
    if "between" not in text.lowered:
        return None
    # "between" also appears in boilerplate; the parties follow the one whose paragraph
    # defines roles: 'between Acme Inc., a Delaware corporation ("Supplier"), and ...'.
    for between in _BETWEEN.finditer(text.text):
        paragraph = text.text[between.end() :].split("\n\n", 1)[0]
        parties, start, last = [], 0, 0
        for role in _ROLE.finditer(paragraph):
            chunk, start = paragraph[start : role.start()], role.end()
            if role[1].lower() in _NOT_ROLES:
                continue
            chunk = re.sub(r"^[\s,]*(?:and\s+)?", "", chunk)
            name = chunk.split(", ", 1)[0].strip(" ,")  # the description follows the first comma
            if name:
                parties.append({"name": name, "role": role[1].strip()})
                last = role.end()
        if parties:
            return parties, text.text[between.start() : between.end() + last]
    return None


def _contract_type(text: _Text) -> _Read | None:
    start = len(text.text) - len(text.text.lstrip())
    first_line = text.text[start : start + 200].split("\n", 1)[0].strip()
    if _TITLE_LINE.match(first_line):
        return " ".join(first_line.lower().split()), first_line
    if '"agreement")' not in text.lowered:
        return None
    named = _AGREEMENT_NAME.search(text.text)
    return (" ".join(named[1].lower().split()), named[0]) if named else None


def _effective_date(text: _Text) -> _Read | None:
    if "effective date" not in text.lowered:
        return None
    marker = _EFFECTIVE_DATE.search(text.text)
    if marker is None:
        return None
    dates = list(_DATE.finditer(text.text, 0, marker.start()))
    if not dates:
        return None
    match = dates[-1]
    if match[1]:
        month, day, year = _MONTHS[match[1].lower()], int(match[2]), int(match[3])
    else:
        day, month, year = int(match[4]), _MONTHS[match[5].lower()], int(match[6])
    return f"{year:04d}-{month:02d}-{day:02d}", text.text[match.start() : marker.end()]


def _term_months(text: _Text) -> _Read | None:
    for sentence, lowered in text.sentences_with(*_TERM_CONTEXT):
        if "renew" in lowered or "confidential" in lowered:
            continue
        duration = _DURATION.search(sentence)
        if duration:
            count = int(duration[1])
            return (count * 12 if duration[2].lower().startswith("year") else count), sentence
    return None


def _termination_notice_days(text: _Text) -> _Read | None:
    for sentence, lowered in text.sentences_with("terminat"):
        if "notice" in lowered and not any(word in lowered for word in _CAUSED_TERMINATION):
            notice = _NOTICE.search(sentence)
            if notice:
                return int(notice[1]), sentence
    return None


def _payment_terms_days(text: _Text) -> _Read | None:
    for sentence, lowered in text.sentences_with("invoice", "payable", "payment"):
        if "day" in lowered and "terminat" not in lowered:
            days = _PAYMENT_DAYS.search(sentence)
            if days:
                return int(days[1] or days[2]), sentence
    return None


def _total_value(text: _Text) -> _Read | None:
    for sentence, lowered in text.sentences_with(*_VALUE_CONTEXT):
        if not any(word in lowered for word in _NOT_VALUE):
            money = _money(sentence)
            if money:
                return money, sentence
    return None


def _liability_cap(text: _Text) -> _Read | None:
    for sentence, lowered in text.sentences_with("liab"):
        if "insur" not in lowered and any(word in lowered for word in _CAP_CONTEXT):
            money = _money(sentence)
            if money:
                return money, sentence
    return None


def _confidentiality_years(text: _Text) -> _Read | None:
    for sentence, lowered in text.sentences_with("confidential"):
        if "year" in lowered:
            years = _YEARS.search(sentence)
            if years:
                return int(years[1]), sentence
    return None


def _governing_law(text: _Text) -> _Read | None:
    if "laws of" not in text.lowered and "law of" not in text.lowered:
        return None
    law = _GOVERNING_LAW.search(" ".join(text.text.split()))
    return ((law[1] or law[2]).strip(), law[0]) if law else None


def _auto_renewal(text: _Text) -> _Read | None:
    if "renew" not in text.lowered:
        return None
    for value, wording in ((False, _NO_RENEWAL), (True, _RENEWAL)):
        if said := wording.search(text.text):
            sentence = next((s for s, _ in text.sentences if wording.search(s)), said[0])
            return value, sentence
    return None


def _money(sentence: str) -> dict[str, Any] | None:
    match = _MONEY.search(sentence)
    if match is None:
        return None
    symbol, digits = (match[1], match[2]) if match[1] else (match[4], match[3])
    amount = float(digits.replace(",", ""))
    return {
        "amount": int(amount) if amount.is_integer() else amount,
        "currency": _CURRENCIES[symbol.lower()],
    }


# Schema order: the answer lists the fields in the order the pipeline's schema declares them.
_READERS: tuple[tuple[str, Callable[[_Text], Any]], ...] = (
    ("parties", _parties),
    ("contract_type", _contract_type),
    ("effective_date", _effective_date),
    ("term_months", _term_months),
    ("total_value", _total_value),
    ("payment_terms_days", _payment_terms_days),
    ("termination_notice_days", _termination_notice_days),
    ("liability_cap", _liability_cap),
    ("confidentiality_years", _confidentiality_years),
    ("governing_law", _governing_law),
    ("auto_renewal", _auto_renewal),
)
