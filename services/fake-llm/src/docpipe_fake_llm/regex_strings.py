"""A string that a regular expression matches, generated from the parsed expression.

Walks the tree of Python's own regex parser (literals, classes, categories, repeats, groups,
alternation, anchors). Lookarounds and back-references are not generated: the caller checks
the result with ``re`` and falls back when it does not match.
"""

from __future__ import annotations

import importlib
import random
import string
from typing import Any

__all__ = ["generate"]

# The parser behind ``re`` (re._parser since 3.11; its old name sre_parse warns on import).
_parser: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

_UNBOUNDED_EXTRA = 3  # "x+" gives at most this many more than its minimum
_CATEGORIES = {
    "CATEGORY_DIGIT": string.digits,
    "CATEGORY_NOT_DIGIT": string.ascii_letters,
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": string.ascii_letters + string.digits,
    "CATEGORY_WORD": string.ascii_letters + string.digits + "_",
    "CATEGORY_NOT_WORD": " -.,",
}
_PRINTABLE = string.ascii_letters + string.digits + " -_.,"


def generate(pattern: str, *, seed: int) -> str | None:
    """A string ``re.search(pattern, ...)`` should accept, or None when the pattern uses what
    cannot be generated."""
    rng = random.Random(seed)
    try:
        return "".join(_emit(_parser.parse(pattern), rng, {}))
    except _Unsupported:
        return None


class _Unsupported(Exception):
    pass


def _emit(tokens: Any, rng: random.Random, groups: dict[int, str]) -> list[str]:
    out: list[str] = []
    for op, arg in tokens:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append(next(c for c in _PRINTABLE if ord(c) != arg))
        elif name == "ANY":
            out.append(rng.choice(string.ascii_letters))
        elif name == "IN":
            out.append(_from_class(arg, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            high = low + _UNBOUNDED_EXTRA if high == _c.MAXREPEAT else high
            for _ in range(rng.randint(low, max(low, min(high, low + _UNBOUNDED_EXTRA)))):
                out.extend(_emit(sub, rng, groups))
        elif name == "SUBPATTERN":
            group, _, _, sub = arg
            text = "".join(_emit(sub, rng, groups))
            if group is not None:
                groups[group] = text
            out.append(text)
        elif name == "ATOMIC_GROUP":
            out.extend(_emit(arg, rng, groups))
        elif name == "BRANCH":
            out.extend(_emit(rng.choice(arg[1]), rng, groups))
        elif name == "GROUPREF":
            out.append(groups.get(arg, ""))
        elif name == "AT":
            continue  # anchors match where the string starts and ends
        else:
            raise _Unsupported(name)
    return out


def _from_class(items: Any, rng: random.Random) -> str:
    allowed: list[str] = []
    negated = False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            allowed.append(chr(arg))
        elif name == "RANGE":
            allowed.extend(chr(c) for c in range(arg[0], min(arg[1], arg[0] + 200) + 1))
        elif name == "CATEGORY":
            allowed.extend(_CATEGORIES.get(str(arg), ""))
        else:
            raise _Unsupported(name)
    choices = [c for c in _PRINTABLE if c not in allowed] if negated else allowed
    if not choices:
        raise _Unsupported("empty class")
    return rng.choice(choices)
