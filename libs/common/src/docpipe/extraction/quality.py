"""Whether a text layer holds real words, without a dictionary (documents come in any
language): the share of its characters that stand in word-shaped tokens.

A text layer can be there and still be garbage: a bad OCR someone ran before ("inc «POAH
«3E*»CM /^ AH"), a font without its Unicode map (glyph numbers read as control or
private-use characters), a wrong encoding (letters shifted into consonant soup). Real text
of any alphabet is mostly tokens of letters in one case pattern, with vowels in its longer
words, or numbers; the score says how much of the layer is, and the reader OCRs a page that
scores below ``DOCPIPE_TEXT_LAYER_MIN_SCORE``.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["text_layer_score"]

# Latin vowels (accents stripped first): a Latin word of four letters or more without one
# is not a word.
_VOWELS = frozenset("aeiouy")
_LONG_WORD = 4
# Below this many Latin letters, their share of vowels says nothing.
_MIN_LETTERS = 40
# What may stand inside a word: an apostrophe, a hyphen, a dot ("e.g"), brackets ("(WHO)는").
_JOINERS = re.compile("['\u2019.()-]")
_NUMBER = re.compile(r"^[+-]?\d[\d.,:/%-]*$")
# Most words of Latin text, told at once: short, or with a vowel, in one case pattern.
_PLAIN = re.compile(r"[A-Z]?[a-z]{0,2}|[A-Z]{1,3}|[A-Z]?[a-z]*[aeiouy][a-z]*|[A-Z]*[AEIOUY][A-Z]*")
# A number with its unit or counter run on: "10th", "5mm", "158명".
_COUNTED = re.compile(r"^\d[\d.,]*[^\W\d_]+$")
# A text whose Latin letters are almost all consonants (or vowels) is no language: shifted
# letters of a wrong encoding are. The score drops steeply outside this share of vowels.
_VOWEL_SHARE = (0.25, 0.7)
_VOWEL_PENALTY = 4
_BAD_CATEGORIES = frozenset({"Cc", "Co", "Cn", "Cs"})


def text_layer_score(text: str) -> float:
    """0-1: the share of the text's non-space characters that stand in word-shaped tokens
    (words, numbers), lowered steeply when its Latin letters have too few or too many
    vowels; 1.0 for a text without any character."""
    good = bad = 0
    for token in text.split():
        core = token.strip(_EDGE_PUNCTUATION)
        if not core:
            # Punctuation alone (a dash, a bullet) counts for nothing, unless it holds
            # characters no text has (control, private use, unassigned).
            if any(unicodedata.category(c) in _BAD_CATEGORIES for c in token):
                bad += len(token)
        elif _PLAIN.fullmatch(core) or _NUMBER.match(core) or _is_word(core):
            good += len(core)
        else:
            bad += len(token)
    if good + bad == 0:
        return 1.0
    score = good / (good + bad)
    lowered = text.lower()
    letters = sum(lowered.count(c) for c in "abcdefghijklmnopqrstuvwxyz")
    if letters >= _MIN_LETTERS:
        share = sum(lowered.count(c) for c in _VOWELS) / letters
        low, high = _VOWEL_SHARE
        if not low <= share <= high:
            score *= min(share / low, (1 - share) / (1 - high), 1.0) ** _VOWEL_PENALTY
    return round(score, 3)


def _is_word(core: str) -> bool:
    """Letters in one case pattern (or a caseless script), with vowels when Latin and long,
    possibly joined by apostrophes, hyphens, dots or brackets, or with numbers."""
    parts = [p for p in _JOINERS.split(core) if p]
    if not parts:
        return False
    for part in parts:
        if part.isdigit() or _COUNTED.match(part):
            continue
        if not part.isalpha() or not _one_case(part):
            return False
        latin = _latin_letters(part)
        if len(latin) >= _LONG_WORD and not any(c in _VOWELS for c in latin):
            return False
    return any(not p.isdigit() for p in parts)


def _one_case(word: str) -> bool:
    """lower, UPPER or Title; a script without case (Hangul, Han, Arabic) always is."""
    if not any(c.isupper() or c.islower() for c in word):
        return True
    return word.islower() or word.isupper() or (word[0].isupper() and word[1:].islower())


def _latin_letters(word: str) -> str:
    """The word's Latin letters lower-cased, accents stripped (é -> e)."""
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if "a" <= c <= "z")


# Punctuation that may lead or trail a word: quotes, brackets, sentence marks, bullets.
_EDGE_PUNCTUATION = (
    "\"'\u201c\u201d\u2018\u2019\u201e\u00ab\u00bb"  # quotation marks
    "()[]{}<>.,;:!?\u2026*\u2022\u00b7\u2013\u2014-_/\\|"
)
