"""Equations (Office Math, ``m:oMath``) as linear text, close to Word's own linear format:
``(a+b)/c``, ``x^2``, ``x_i``, ``√(x)``, ``∑_(i=1)^n x_i``, ``[a, b; c, d]`` for a matrix.
An operand of more than one symbol is put in parentheses, so the text reads one way."""

from __future__ import annotations

import re
from collections.abc import Callable

from lxml import etree

from docpipe.extraction.word.package import M, W

__all__ = ["linear_math"]

_SIMPLE = re.compile(r"[\w.]+|.")


def linear_math(element: etree._Element) -> str:
    """The equation (``m:oMathPara`` or ``m:oMath``) as one line of text."""
    if element.tag == M + "oMathPara":
        return " ".join(_math(child) for child in element if child.tag == M + "oMath")
    return _math(element)


def _math(element: etree._Element) -> str:
    tag = element.tag
    if not isinstance(tag, str):
        return ""
    local = tag[len(M) :] if tag.startswith(M) else None
    if local is None:
        if tag == W + "t":
            return element.text or ""
        return "".join(_math(c) for c in element) if tag == W + "r" else ""
    handler = _HANDLERS.get(local)
    if handler is not None:
        return handler(element)
    if local == "t":
        return element.text or ""
    if local.endswith("Pr"):  # properties: how it is drawn, no text
        return ""
    return "".join(_math(c) for c in element)


def _arg(element: etree._Element, name: str) -> str:
    found = element.find(M + name)
    return "" if found is None else _math(found)


def _grouped(text: str) -> str:
    """``text`` as one operand: as it is when it is one symbol or already bracketed."""
    text = text.strip()
    if not text or _SIMPLE.fullmatch(text) or _bracketed(text):
        return text
    return f"({text})"


def _bracketed(text: str) -> bool:
    pairs = {"(": ")", "[": "]", "{": "}"}
    if text[0] not in pairs or text[-1] != pairs[text[0]]:
        return False
    depth = 0
    for i, char in enumerate(text):
        depth += char == text[0]
        depth -= char == pairs[text[0]]
        if depth == 0 and i < len(text) - 1:
            return False  # "(a)+(b)": closed before the end
    return True


def _property(element: etree._Element, properties: str, name: str, default: str) -> str:
    found = element.find(f"{M}{properties}/{M}{name}")
    if found is None:
        return default
    return found.get(M + "val", default)


def _scripts(element: etree._Element) -> str:
    text = ""
    if (sub := _arg(element, "sub")).strip():
        text += "_" + _grouped(sub)
    if (sup := _arg(element, "sup")).strip():
        text += "^" + _grouped(sup)
    return text


def _fraction(element: etree._Element) -> str:
    return f"{_grouped(_arg(element, 'num'))}/{_grouped(_arg(element, 'den'))}"


def _script(element: etree._Element) -> str:
    return _grouped(_arg(element, "e")) + _scripts(element)


def _pre_script(element: etree._Element) -> str:
    return _scripts(element) + _grouped(_arg(element, "e"))


def _radical(element: etree._Element) -> str:
    degree = _arg(element, "deg").strip()
    body = _arg(element, "e")
    return f"√({degree}&{body})" if degree else "√" + _grouped(body)


def _n_ary(element: etree._Element) -> str:
    operator = _property(element, "naryPr", "chr", "∫")
    return f"{operator}{_scripts(element)} {_grouped(_arg(element, 'e'))}".strip()


def _delimiters(element: etree._Element) -> str:
    begin = _property(element, "dPr", "begChr", "(")
    end = _property(element, "dPr", "endChr", ")")
    separator = _property(element, "dPr", "sepChr", "|")
    parts = [_math(e) for e in element.iterchildren(M + "e")]
    return begin + separator.join(parts) + end


def _function(element: etree._Element) -> str:
    name, argument = _arg(element, "fName").strip(), _arg(element, "e").strip()
    return name + argument if argument.startswith(("(", "[")) else f"{name} {argument}".strip()


def _accent(element: etree._Element) -> str:
    return _arg(element, "e") + _property(element, "accPr", "chr", "\u0302")


def _bar(element: etree._Element) -> str:
    below = _property(element, "barPr", "pos", "top") == "bot"
    return _arg(element, "e") + ("\u0332" if below else "\u0305")


def _limit(mark: str) -> Callable[[etree._Element], str]:
    def limit(element: etree._Element) -> str:
        return _arg(element, "e").strip() + mark + _grouped(_arg(element, "lim"))

    return limit


def _rows(element: etree._Element) -> str:
    return "; ".join(_math(e).strip() for e in element.iterchildren(M + "e"))


def _matrix(element: etree._Element) -> str:
    rows = [
        ", ".join(_math(e).strip() for e in row.iterchildren(M + "e"))
        for row in element.iterchildren(M + "mr")
    ]
    return "[" + "; ".join(rows) + "]"


_HANDLERS: dict[str, Callable[[etree._Element], str]] = {
    "f": _fraction,
    "sSup": _script,
    "sSub": _script,
    "sSubSup": _script,
    "sPre": _pre_script,
    "rad": _radical,
    "nary": _n_ary,
    "d": _delimiters,
    "func": _function,
    "acc": _accent,
    "bar": _bar,
    "limLow": _limit("_"),
    "limUpp": _limit("^"),
    "eqArr": _rows,
    "m": _matrix,
}
