"""Whether a value can be read in the quote it came with: what makes evidence *support* a
value, beyond the quote being in the document.

The rule, by the value's kind (the quote's letters are compared without case, quotation
marks made straight, hyphens, underscores, slashes and other punctuation read as spaces):

- **text** (names, enum members, anything else): its words stand in the quote, in order and
  next to each other ("Acme Ltd." in "ACME LTD, a company ..."; the enum member
  ``fixed_price`` in "on a fixed price basis"). Common company suffixes are one word
  written either way (Ltd/Limited, Inc/Incorporated, Corp/Corporation, Co/Company).
- **a date** written ``YYYY-MM-DD``: the quote states that day in a common form (2025-03-07,
  7 March 2025, March 7, 2025, the 7th day of March, 2025, 07/03/2025 or 03/07/2025, 7.3.2025).
- **a currency code** (``USD``): the code, its symbol ($, €, £, ¥, ...) or its name.
- **a number**: the quote states it in digits (1,250,000.50, 1.250.000,50, 1 250 000,
  1'250'000; "1.5 million", "250k"), in words up to the billions ("twenty-four", "one
  hundred and twenty"), as a percentage of it (5 % for 0.05), or as a duration in a
  larger unit: years for a value in months (2 years: 24) or weeks for one in days (2
  weeks: 14).
- **a boolean** or **null**: nothing in a quote spells true or false; the quote is the
  passage the model read it from, and it supports the value when it is in the document.
  A rule that needs more asks for a person (``review: [{field: ..., missing: true}]``, or
  ``always`` on the step).
- **an object or a list**: every value inside it, by the rules above (a party
  ``{"name": "7.", "role": "Supplier"}`` quoted as "7." is not read there: "Supplier" is
  not in it). An empty one is like null.

Pure functions of their arguments: no database, no model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

__all__ = ["value_in_quote"]


def value_in_quote(value: Any, quote: str) -> bool:
    """Whether ``value`` can be read in ``quote`` (the rule of this module's docstring)."""
    read = _Quote.of(quote)
    return all(read.states(leaf) for leaf in _leaves(value))


def _leaves(value: Any) -> Iterator[Any]:
    """The scalars inside ``value`` (itself, for a scalar)."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_WRITTEN_DATES = (
    # 7 March 2025, the 7th day of March, 2025
    (re.compile(rf"\b{_DAY}\s+(?:day\s+of\s+)?{_MONTH},?\s+(\d{{4}})\b", re.I), (3, 2, 1)),
    # March 7, 2025
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+(\d{{4}})\b", re.I), (3, 1, 2)),
)
_NUMERIC_DATE = re.compile(
    r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b|\b(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})\b"
)

# Symbols and names a quote may write a currency code with.
_CURRENCY_WORDS: Mapping[str, tuple[str, ...]] = {
    "USD": ("$", "us$", "dollar", "dollars"),
    "EUR": ("€", "euro", "euros"),
    "GBP": ("£", "pound", "pounds", "sterling"),
    "JPY": ("¥", "yen"),
    "CNY": ("¥", "yuan", "renminbi", "rmb"),
    "CHF": ("swiss franc", "swiss francs", "fr."),
    "CAD": ("$", "c$", "ca$", "canadian dollar", "canadian dollars"),
    "AUD": ("$", "a$", "au$", "australian dollar", "australian dollars"),
    "NZD": ("$", "nz$", "new zealand dollar", "new zealand dollars"),
    "SGD": ("$", "s$", "singapore dollar", "singapore dollars"),
    "HKD": ("$", "hk$", "hong kong dollar", "hong kong dollars"),
    "INR": ("₹", "rupee", "rupees"),
    "SEK": ("kr", "krona", "kronor"),
    "NOK": ("kr", "krone", "kroner"),
    "DKK": ("kr", "krone", "kroner"),
    "PLN": ("zł", "zloty", "zlotys"),
    "BRL": ("r$", "real", "reais"),
    "ZAR": ("rand",),
    "RUB": ("₽", "rouble", "roubles", "ruble", "rubles"),
}
# One word written either way.
_SAME_WORD = {"limited": "ltd", "incorporated": "inc", "corporation": "corp", "company": "co"}
_WORDS = re.compile(r"[^\W_]+", re.UNICODE)

# Digits with the separators contracts write: 1,250,000.50 / 1.250.000,50 / 1 250 000 /
# 1'250'000; a scale word may follow (1.5 million, 250k), and a unit (2 years).
_DIGITS = re.compile(
    r"(?<![\d.,])(\d{1,3}(?:[,.' ]\d{3})+(?:[.,]\d+)?|\d+(?:[.,]\d+)?)"
    r"(?:\s?(%|percent\b|per\s+cent\b|k\b|m\b|mn\b|bn\b|thousand\b|million\b|billion\b))?"
    r"(?:\s*\)?\s*(years?|weeks?)\b)?",
    re.I,
)
# (thousands separator, decimal mark) pairs a number may be written with.
_SEPARATORS = ((",", "."), (".", ","), (" ", "."), (" ", ","), ("'", "."), ("'", ","))
_SCALES = {
    "k": 1e3,
    "thousand": 1e3,
    "m": 1e6,
    "mn": 1e6,
    "million": 1e6,
    "bn": 1e9,
    "billion": 1e9,
}
_UNITS = {"year": 12, "years": 12, "week": 7, "weeks": 7}
_ONES = {
    word: n
    for n, word in enumerate(
        (
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        )
    )
}
_TENS = {
    word: 10 * n
    for n, word in enumerate(
        ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"), start=2
    )
}
_MULTIPLIERS = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}


class _Quote:
    """A quote as values are looked for in it: its words, dates and numbers, read once."""

    def __init__(self, quote: str) -> None:
        self.text = quote
        self.lowered = quote.casefold()
        self.words = tuple(_word(w) for w in _WORDS.findall(self.lowered))

    @staticmethod
    @lru_cache(maxsize=64)  # a step checks each quote once per value inside it
    def of(quote: str) -> _Quote:
        return _Quote(quote)

    def states(self, value: Any) -> bool:
        if value is None or isinstance(value, bool) or value == "":
            return True
        if isinstance(value, int | float):
            return math.isfinite(value) and any(_same(value, n) for n in self.numbers)
        text = str(value)
        if (date := _ISO_DATE.match(text.strip())) is not None:
            return tuple(map(int, date.groups())) in self.dates
        if text in _CURRENCY_WORDS and self._names_currency(text):
            return True
        wanted = tuple(_word(w) for w in _WORDS.findall(text.casefold()))
        return bool(wanted) and _contains(self.words, wanted)

    def _names_currency(self, code: str) -> bool:
        if code.casefold() in self.words:
            return True
        return any(
            (word in self.lowered)
            if not word.isalpha()
            else _contains(self.words, tuple(word.split()))
            for word in _CURRENCY_WORDS[code]
        )

    @property
    def dates(self) -> frozenset[tuple[int, int, int]]:
        return _dates(self.text)

    @property
    def numbers(self) -> frozenset[float]:
        return _numbers(self.text)


def _word(word: str) -> str:
    return _SAME_WORD.get(word, word)


def _contains(words: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    """Whether ``wanted`` stands in ``words`` as a run of whole words."""
    size = len(wanted)
    return any(words[i : i + size] == wanted for i in range(len(words) - size + 1))


def _same(value: float, number: float) -> bool:
    return math.isclose(value, number, rel_tol=1e-9, abs_tol=1e-9)


@lru_cache(maxsize=64)
def _dates(quote: str) -> frozenset[tuple[int, int, int]]:
    """Every (year, month, day) the quote states."""
    found: set[tuple[int, int, int]] = set()
    for pattern, (y, m, d) in _WRITTEN_DATES:
        for match in pattern.finditer(quote):
            month = _MONTHS[match[m].casefold()]
            found.add((int(match[y]), month, int(match[d])))
    for match in _NUMERIC_DATE.finditer(quote):
        if match[1]:
            found.add((int(match[1]), int(match[2]), int(match[3])))
        else:  # day and month are in either order (07/03/2025): both readings count
            a, b, year = int(match[4]), int(match[5]), int(match[6])
            found |= {(year, b, a), (year, a, b)}
    return frozenset(found)


@lru_cache(maxsize=64)
def _numbers(quote: str) -> frozenset[float]:
    """Every number the quote states, in each reading its separators allow."""
    found: set[float] = set()
    for match in _DIGITS.finditer(quote.replace("\u00a0", " ").replace("\u202f", " ")):
        scale, unit = (match[2] or "").casefold(), (match[3] or "").casefold()
        readings = _readings(match[1])
        for number in readings:
            found.add(number)
            if scale in ("%", "percent") or scale.startswith("per"):
                found.add(number / 100)
            elif scale:
                found.add(number * _SCALES[scale])
            if unit:
                found.add(number * _UNITS[unit])
    found |= _spelled_numbers(quote.casefold())
    return frozenset(found)


def _readings(digits: str) -> set[float]:
    """What ``digits`` may mean: 1,250 is 1250, or 1.25 where a comma is the decimal mark."""
    readings = set()
    for thousands, decimal in _SEPARATORS:
        whole, mark, fraction = digits.partition(decimal)
        groups = whole.split(thousands)
        if (mark and not fraction.isdigit()) or not all(g.isdigit() for g in groups):
            continue
        if len(groups) > 1 and (len(groups[0]) > 3 or any(len(g) != 3 for g in groups[1:])):
            continue
        readings.add(float(f"{''.join(groups)}.{fraction or 0}"))
    return readings


def _spelled_numbers(lowered: str) -> set[float]:
    """Numbers written in words ("twenty-four", "one hundred and twenty thousand"), each run
    of number words read as one number; with a unit after it, its value in the smaller
    unit too ("two years": 2 and 24)."""
    found: set[float] = set()
    words = re.findall(r"[a-z]+", lowered)
    i = 0
    while i < len(words):
        total = current = 0
        j = i
        while j < len(words):
            word = words[j]
            if word in _ONES:
                current += _ONES[word]
            elif word in _TENS:
                current += _TENS[word]
            elif word == "hundred" and j > i:
                current *= 100
            elif word in _MULTIPLIERS and j > i:
                total += current * _MULTIPLIERS[word]
                current = 0
            elif (
                word == "and"
                and j > i
                and words[j - 1] in _MULTIPLIERS
                and j + 1 < len(words)
                and _is_number_word(words[j + 1])
            ):
                pass  # one hundred and twenty
            else:
                break
            j += 1
        if j > i:
            number = total + current
            found.add(float(number))
            # A number in words is often repeated in digits ("twenty-four (24) months"):
            # the unit after either applies.
            after = words[j : j + 2] if j < len(words) else []
            unit = next((w for w in after if w in _UNITS), None)
            if unit is not None:
                found.add(float(number * _UNITS[unit]))
            i = j
        else:
            i += 1
    return found


def _is_number_word(word: str) -> bool:
    return word in _ONES or word in _TENS or word in _MULTIPLIERS
