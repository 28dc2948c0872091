"""Evidence: where in the document the quote a value was read from stands.

A model copies a passage the way a reader would: on one line, words split at a line end
joined again, quotation marks in its own style. :func:`locate_quote` finds the passage in
the document's text all the same, and gives offsets into that text, so that
``document[start:end]`` is the passage as the document has it. What the model quoted is
never trusted to be in the document: a quote that cannot be found makes the value
``unsupported`` (kept, and flagged), never silently dropped. Nor is the quote trusted to
hold the value: a value is ``supported`` only when its quote is in the document *and* the
value can be read in the quote (docpipe.pipelines.value_reading says how); otherwise it is
"quote found, value not in it" (:class:`Support`). A value a reviewer corrected is
supported by no quote of the model's any more (docpipe.pipelines.edits).

Pure functions of their arguments: no database, no model.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from functools import lru_cache
from typing import Any

from docpipe.pipelines.value_reading import value_in_quote

__all__ = [
    "EVIDENCE_SCHEMA",
    "MAX_QUOTE_CHARS",
    "QUOTE_BOX_SCHEMA",
    "Support",
    "evidence_for",
    "evidence_records",
    "locate_quote",
    "normalised",
    "page_of",
    "quoted_values",
    "section_of",
    "support_label",
    "support_of",
    "unsupported_values",
]


class Support(StrEnum):
    """What a value's evidence says for it (a record's ``support``)."""

    SUPPORTED = "supported"  # the quote is in the document, and the value can be read in it
    VALUE_NOT_IN_QUOTE = "value_not_in_quote"  # the quote is found; the value is not in it
    QUOTE_NOT_FOUND = "quote_not_found"  # the quote is not in the document
    CORRECTED = "corrected"  # a reviewer changed the value: the model's quote is not its support


_SUPPORT_LABELS = {
    Support.SUPPORTED: "supported",
    Support.VALUE_NOT_IN_QUOTE: "quote found, value not in it",
    Support.QUOTE_NOT_FOUND: "quote not in the document",
    Support.CORRECTED: "corrected",
}

# A quote is a passage, not the document: a longer one is refused by the answer's schema
# and not searched.
MAX_QUOTE_CHARS = 1000

# Hyphens are layout as much as spelling: a word broken at a line end ("termi-\nnation"), a
# compound broken after its own hyphen ("non-\ndisclosure"), a soft hyphen where a PDF may
# break a word. Quotes and documents are compared without them, so a passage is found
# however the model joined it again.
_HYPHEN = re.compile(r"-\s*|\u00ad")
_DOUBLE_QUOTES = '"\u201c\u201d\u201e\u00ab\u00bb'
_SINGLE_QUOTES = "'\u2018\u2019\u201a"
# (str.replace per mark: a translate table costs a Python lookup per character)
_STRAIGHT_QUOTES = [(mark, '"') for mark in _DOUBLE_QUOTES[1:]] + [
    (mark, "'") for mark in _SINGLE_QUOTES[1:]
]
_SPACES = re.compile(r"\s+")
# Where normalisation changes a document: a hyphen with the whitespace after it (dropped), a
# soft hyphen (dropped) with the whitespace after it (one space), and any whitespace run but
# a lone space (one space). The text between is kept as it is, offsets and all.
_EDITS = re.compile(r"(-\s*)|\u00ad(\s*)|[^\S ]\s*| \s+")
_WORD = re.compile(r"\w")

# Where a quote stands on its page, one box per line it covers: PDF points on the page as
# read upright (its image from GET /documents/{id}/pages/{page} is drawn so), origin at
# the top left; the page's size beside, to scale the box onto the image.
QUOTE_BOX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["page", "left", "top", "right", "bottom", "page_width", "page_height"],
    "properties": {
        "page": {"type": "integer", "minimum": 1},
        **{name: {"type": "number"} for name in ("left", "top", "right", "bottom")},
        "page_width": {"type": "number", "exclusiveMinimum": 0},
        "page_height": {"type": "number", "exclusiveMinimum": 0},
    },
}

# One value with its evidence, as a step records it in the ``evidence`` list of its output
# and GET /runs/{id} shows it: offsets into the document text (``end`` exclusive), the
# 1-based page and the section holding ``start``; all null when the quote is not found.
# ``supported`` holds when ``support`` is "supported" (a record made before ``support``
# existed has none: its ``supported`` said only that the quote was found).
# ``path``, where known, is the JSON Pointer of the value in the step's output (a reviewer's
# correction of that value is carried into the record: ``corrected``, ``corrected_by``, the
# model's quote moved to ``model_quote`` and the offsets null). GET /runs/{id} adds the quote's
# ``boxes`` on its page(s), from the geometry extraction kept with each page
# (docpipe.state.pages): a step records offsets, not places.
EVIDENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["field", "value", "quote", "start", "end", "page", "section", "supported"],
    "properties": {
        "field": {"type": "string"},
        "path": {"type": "string"},
        "value": {},
        "quote": {"type": "string", "maxLength": MAX_QUOTE_CHARS},
        "start": {"type": ["integer", "null"], "minimum": 0},
        "end": {"type": ["integer", "null"], "minimum": 0},
        "page": {"type": ["integer", "null"], "minimum": 1},
        "section": {"type": ["string", "null"]},
        "section_title": {"type": ["string", "null"]},
        "supported": {"type": "boolean"},
        "support": {"enum": [str(s) for s in Support]},
        "corrected": {"type": "boolean"},
        "corrected_by": {"type": ["string", "null"]},
        "model_quote": {"type": "string", "maxLength": MAX_QUOTE_CHARS},
        "boxes": {"type": "array", "items": QUOTE_BOX_SCHEMA},
    },
}


def normalised(text: str) -> str:
    """``text`` as quotes are compared: hyphens dropped with the whitespace after them,
    whitespace runs made one space, quotation marks made straight."""
    return _SPACES.sub(" ", _straight(_HYPHEN.sub("", text))).strip()


def _straight(text: str) -> str:
    """``text`` with its quotation marks made straight."""
    for mark, straight in _STRAIGHT_QUOTES:
        text = text.replace(mark, straight)
    return text


def locate_quote(
    document: str, quote: str, *, near: tuple[int, int] | None = None
) -> tuple[int, int] | None:
    """``(start, end)`` of ``quote`` in ``document``, or None if it is not there.

    Tolerant of how the passage was copied (see :func:`normalised`); the quote must start
    and end at word boundaries, so "30 days" is not found inside "130 days". When the quote
    occurs more than once, the first occurrence inside ``near`` (the span the value was read
    from) wins, else the first in the document.
    """
    text = normalised(quote)
    if not text or len(quote) > MAX_QUOTE_CHARS:
        return None
    skeleton = _Skeleton.of(document)
    if near is not None and (found := skeleton.find(text, near[0], near[1])):
        return found
    return skeleton.find(text, 0, len(document))


class _Skeleton:
    """A document normalised as quotes are (:func:`normalised`), with the offset in the
    document of every character kept, so that a quote found in the normalised text is
    reported where the document has it. Built once per document: a step locates every
    value's quote in the same text."""

    def __init__(self, document: str) -> None:
        self.document = document
        parts: list[str] = []
        # Where each run of the normalised text starts, there and in the document: a run is
        # kept text (read on from its origin) or the one space that stands for whitespace.
        # Only the edits are visited; most of a document is kept as it is.
        self.starts: list[int] = []
        self.origins: list[int] = []
        length = kept_from = 0
        last = ""  # the normalised text's last character so far

        def keep(text: str, origin: int) -> None:
            nonlocal length, last
            parts.append(text)
            self.starts.append(length)
            self.origins.append(origin)
            length += len(text)
            last = text[-1]

        for edit in _EDITS.finditer(document):
            if kept_from < edit.start():
                keep(document[kept_from : edit.start()], kept_from)
            kept_from = edit.end()
            if edit.group(1) is not None:
                continue  # a hyphen and its whitespace go
            space_at = edit.start(2) if edit.group(2) is not None else edit.start()
            # Whitespace on both sides of a dropped soft hyphen is one space.
            if space_at < edit.end() and last != " ":
                keep(" ", space_at)
        if kept_from < len(document):
            keep(document[kept_from:], kept_from)
        self.text = _straight("".join(parts))

    @staticmethod
    @lru_cache(maxsize=1)  # the document of the step at hand; a large one is not kept longer
    def of(document: str) -> _Skeleton:
        return _Skeleton(document)

    def origin(self, index: int) -> int:
        """The document offset of the normalised text's character ``index``."""
        piece = bisect_right(self.starts, index) - 1
        return self.origins[piece] + (index - self.starts[piece])

    def find(self, text: str, start: int, end: int) -> tuple[int, int] | None:
        """The first occurrence of the normalised ``text`` at word boundaries inside the
        document's ``[start, end)``, as document offsets."""
        piece = bisect_right(self.origins, start) - 1
        index = 0
        if piece >= 0:  # where ``start`` falls in its run (a space stands for its whole run)
            run_end = self.starts[piece + 1] if piece + 1 < len(self.starts) else len(self.text)
            index = min(self.starts[piece] + start - self.origins[piece], run_end)
        while (index := self.text.find(text, index)) != -1:
            first, last = self.origin(index), self.origin(index + len(text) - 1) + 1
            if last > end:
                return None
            if first >= start and self._bounded(first, last, text):
                return first, last
            index += 1
        return None

    def _bounded(self, first: int, last: int, text: str) -> bool:
        """No word character runs on past a quote that starts or ends with one."""
        before = self.document[first - 1 : first] if first else ""
        after = self.document[last : last + 1]
        return not (
            (text[0].isalnum() and _WORD.match(before))
            or (text[-1].isalnum() and _WORD.match(after))
        )


def page_of(page_starts: Sequence[int], offset: int) -> int:
    """The 1-based page holding ``offset``, given the offset where each page starts."""
    return max(1, bisect_right(page_starts, offset))


def section_of(sections: Iterable[Mapping[str, Any]], offset: int) -> Mapping[str, Any] | None:
    """The section (``{"number", "title", "start", "end"}``) whose span holds ``offset``."""
    return next((s for s in sections if int(s["start"]) <= offset < int(s["end"])), None)


def evidence_for(
    document: str,
    quote: str,
    *,
    value: Any,
    page_starts: Sequence[int],
    sections: Sequence[Mapping[str, Any]],
    near: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Where ``quote`` stands, on which page and in which section, and whether it supports
    ``value`` (the evidence of :data:`EVIDENCE_SCHEMA` but its field and value): supported
    when the quote is found and ``value`` can be read in it; when it is not found, the
    offsets, page and section are null."""
    span = locate_quote(document, quote, near=near)
    if span is None:
        return {
            "quote": quote,
            "start": None,
            "end": None,
            "page": None,
            "section": None,
            "section_title": None,
            "supported": False,
            "support": Support.QUOTE_NOT_FOUND.value,
        }
    section = section_of(sections, span[0])
    support = Support.SUPPORTED if value_in_quote(value, quote) else Support.VALUE_NOT_IN_QUOTE
    return {
        "quote": quote,
        "start": span[0],
        "end": span[1],
        "page": page_of(page_starts, span[0]),
        "section": None if section is None else str(section["number"]),
        "section_title": None if section is None else str(section["title"]),
        "supported": support is Support.SUPPORTED,
        "support": support.value,
    }


def support_of(record: Mapping[str, Any]) -> Support:
    """What ``record`` says for its value; a record made before ``support`` existed says
    what its fields do (its ``supported`` meant only that the quote was found)."""
    try:
        return Support(record["support"])
    except (KeyError, ValueError):
        if record.get("corrected"):
            return Support.CORRECTED
        return Support.SUPPORTED if record.get("supported") else Support.QUOTE_NOT_FOUND


def support_label(record: Mapping[str, Any]) -> str:
    """What a person reads for ``record``'s support: "supported", "quote found, value not in
    it", "quote not in the document", "corrected by NAME"."""
    support = support_of(record)
    if support is Support.CORRECTED:
        by = record.get("corrected_by")
        return f"corrected by {by}" if by else "corrected by a reviewer"
    return _SUPPORT_LABELS[support]


def evidence_records(outputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The well-formed evidence records (:data:`EVIDENCE_SCHEMA`) of every step output, in
    step order: a step records them as the ``evidence`` list of its output. Anything else
    under that name (a user's step may use the word for its own data) is not evidence."""
    return [
        dict(item)
        for output in outputs.values()
        if isinstance(output, Mapping) and isinstance(output.get("evidence"), list)
        for item in output["evidence"]
        if _is_record(item)
    ]


def quoted_values(
    answer: Mapping[str, Any],
    prop: str,
    *,
    document: str,
    page_starts: Sequence[int],
    sections: Sequence[Mapping[str, Any]] = (),
    prefix: str = "",
) -> list[dict[str, Any]]:
    """Evidence records of the ``{"value", "quote"}`` objects an answer holds under
    ``prop``: a mapping of names to such objects, or a list of them. ``prefix`` is the
    answer's own place in the step's output (a map step's ``items/3``)."""
    held = answer.get(prop)
    if isinstance(held, Mapping):
        entries = [(str(k), v) for k, v in held.items()]
    elif isinstance(held, list):
        entries = [(str(i), v) for i, v in enumerate(held)]
    else:
        return []
    at = f"{prefix}/{prop}" if prefix else f"/{prop}"
    records = []
    for key, quoted in entries:
        if not isinstance(quoted, Mapping) or not isinstance(quoted.get("quote"), str):
            continue
        where = evidence_for(
            document,
            quoted["quote"],
            value=quoted.get("value"),
            page_starts=page_starts,
            sections=sections,
        )
        name = ".".join(p for p in (*at.strip("/").split("/"), key) if p)
        records.append(
            {"field": name, "path": f"{at}/{key}/value", "value": quoted.get("value"), **where}
        )
    return records


def unsupported_values(
    outputs: Mapping[str, Any], *, only: Support | None = None
) -> list[tuple[str, Support]]:
    """The fields whose recorded evidence does not support their value, with what it says
    (``only``: those that say so); a value a reviewer corrected is not among them (a person
    stands behind it)."""
    found: list[tuple[str, Support]] = []
    for record in evidence_records(outputs):
        support = support_of(record)
        if support in (Support.SUPPORTED, Support.CORRECTED):
            continue
        if only is None or support is only:
            found.append((record["field"], support))
    return found


def _is_record(item: Any) -> bool:
    """Whether ``item`` satisfies :data:`EVIDENCE_SCHEMA`, checked by hand: a results export
    checks every value of thousands of runs, and a schema validator takes 50 us a record
    where this takes 1 (tests/unit/test_evidence_locator.py holds the two to agree)."""
    return (
        isinstance(item, Mapping)
        and item.keys() >= _REQUIRED
        and isinstance(item["field"], str)
        and isinstance(item["quote"], str)
        and len(item["quote"]) <= MAX_QUOTE_CHARS
        and _is_count(item["start"], 0)
        and _is_count(item["end"], 0)
        and _is_count(item["page"], 1)
        and (item["section"] is None or isinstance(item["section"], str))
        and (item.get("section_title") is None or isinstance(item["section_title"], str))
        and isinstance(item["supported"], bool)
        and item.get("support", Support.SUPPORTED) in _SUPPORTS
        and isinstance(item.get("corrected", False), bool)
        and (item.get("corrected_by") is None or isinstance(item["corrected_by"], str))
        and (
            "model_quote" not in item
            or (
                isinstance(item["model_quote"], str) and len(item["model_quote"]) <= MAX_QUOTE_CHARS
            )
        )
        and ("boxes" not in item or _are_boxes(item["boxes"]))
    )


_REQUIRED = frozenset(EVIDENCE_SCHEMA["required"])
_SUPPORTS = frozenset(str(s) for s in Support)
_BOX_REQUIRED = frozenset(QUOTE_BOX_SCHEMA["required"])


def _are_boxes(boxes: Any) -> bool:
    return isinstance(boxes, list) and all(
        isinstance(box, Mapping)
        and box.keys() >= _BOX_REQUIRED
        and _is_count(box["page"], 1)
        and box["page"] is not None
        and all(_is_number(box[k]) for k in ("left", "top", "right", "bottom"))
        and all(_is_number(box[k]) and box[k] > 0 for k in ("page_width", "page_height"))
        for box in boxes
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any, minimum: int) -> bool:
    """null, or a JSON Schema integer (1.0 is one; true is not) of at least ``minimum``."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (isinstance(value, int) or value.is_integer()) and value >= minimum
