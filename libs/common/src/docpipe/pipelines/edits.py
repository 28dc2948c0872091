"""A reviewer's edits to a step's output: applied, checked against the step's schema, and
described field by field for the audit trail.

An edit names a value by its JSON Pointer (RFC 6901, ``/fields/total_value/amount``) and
says what the reviewer did with it: ``confirm`` (checked, unchanged), ``correct`` (a new
value) or ``clear`` (removed). Evidence records that point at a corrected value
(``path``) carry the new value, marked ``corrected`` by the reviewer's name, so that what is
exported is what the reviewer approved; the model's quote is kept as ``model_quote`` and
is no longer the value's support (no quote, offsets or page: nothing is shown on the page
for it, and ``supported`` is false). A reviewer may attach a passage of the document as a
value's quote instead (:class:`ReviewerQuote`, :func:`attach_quotes`): it is then the
value's support, judged as a model's quote is (the value must be readable in it).

Pure functions of their arguments: no database, no model.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema

from docpipe.pipelines.evidence import MAX_QUOTE_CHARS, Support, page_of
from docpipe.pipelines.value_reading import value_in_quote

__all__ = [
    "Edit",
    "EditError",
    "FieldError",
    "ReviewerQuote",
    "apply_edits",
    "attach_quotes",
    "carry_corrections",
    "field_diff",
    "schema_errors",
]

EditAction = Literal["confirm", "correct", "clear"]
_MISSING = object()


@dataclass(frozen=True)
class FieldError:
    """What is wrong, and where (a JSON Pointer into the output)."""

    path: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class EditError(ValueError):
    """The edits cannot be applied, or their result breaks the step's schema."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("; ".join(f"{e.path or '/'}: {e.message}" for e in errors))
        self.errors = list(errors)


@dataclass(frozen=True)
class Edit:
    path: str
    action: EditAction
    value: Any = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"path": self.path, "action": self.action}
        if self.action == "correct":
            body["value"] = self.value
        return body


def apply_edits(output: Mapping[str, Any], edits: Sequence[Edit]) -> dict[str, Any]:
    """``output`` with ``edits`` applied in order (``output`` itself is not changed);
    EditError naming each edit that points at nothing it could change."""
    result = copy.deepcopy(dict(output))
    errors = []
    for edit in edits:
        try:
            _apply(result, edit)
        except _PointerError as exc:
            errors.append(FieldError(edit.path, str(exc)))
    if errors:
        raise EditError(errors)
    return result


def schema_errors(output: Mapping[str, Any], schema: Mapping[str, Any]) -> list[FieldError]:
    """Every way ``output`` breaks ``schema``, each at the value it concerns."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    found = sorted(validator.iter_errors(output), key=lambda e: list(map(str, e.absolute_path)))
    return [FieldError(_pointer(e.absolute_path), e.message) for e in found]


def field_diff(before: Any, after: Any) -> list[dict[str, Any]]:
    """The values that differ, leaf by leaf: ``{"path", "change", "before", "after"}``
    with change ``added``, ``removed`` or ``changed``."""
    changes: list[dict[str, Any]] = []
    _diff(before, after, "", changes)
    return changes


def carry_corrections(
    before: Mapping[str, Any], after: dict[str, Any], *, reviewer: str
) -> dict[str, Any]:
    """``after`` with each evidence record whose value (at its ``path``) was changed from
    ``before`` showing the new value, ``"corrected": true`` and ``"corrected_by"``
    ``reviewer``, and no longer supported by the model's quote (kept as ``model_quote``)."""
    records = after.get("evidence")
    if not isinstance(records, list):
        return after
    for record in records:
        path = record.get("path") if isinstance(record, dict) else None
        if not isinstance(path, str):
            continue
        old, new = _at(before, path), _at(after, path)
        if old != new:
            record.update(
                value=None if new is _MISSING else new,
                corrected=True,
                corrected_by=reviewer,
                supported=False,
                support=Support.CORRECTED.value,
                model_quote=record.get("model_quote", record.get("quote", "")),
                quote="",
                start=None,
                end=None,
                page=None,
                section=None,
                section_title=None,
            )
            record.pop("boxes", None)
    return after


@dataclass(frozen=True)
class ReviewerQuote:
    """A passage of the document a reviewer chose as the support of the value at ``path``
    (a JSON Pointer): its offsets in the document's text, ``end`` exclusive."""

    path: str
    start: int
    end: int


def attach_quotes(
    after: dict[str, Any],
    quotes: Sequence[ReviewerQuote],
    *,
    document: str,
    page_starts: Sequence[int],
    reviewer: str,
) -> dict[str, Any]:
    """``after`` with each quote set on the evidence record of its value: the passage as
    its quote, its offsets and page, ``quoted_by`` the reviewer, ``supported`` when the
    value (as approved) can be read in it, else "quote found, value not in it"; a
    correction's ``corrected_by`` and ``model_quote`` stay. EditError naming each quote
    whose value no evidence record holds, or whose offsets are not a passage of the
    document (empty, past its end, longer than a quote may be)."""
    records = after.get("evidence")
    by_path = {
        r["path"]: r
        for r in (records if isinstance(records, list) else [])
        if isinstance(r, dict) and isinstance(r.get("path"), str)
    }
    errors = []
    for quote in quotes:
        record = by_path.get(quote.path)
        if record is None:
            errors.append(
                FieldError(
                    quote.path,
                    "no evidence record holds this value: a quote is "
                    "attached to a value the step quoted",
                )
            )
            continue
        passage = document[quote.start : quote.end] if quote.start >= 0 else ""
        if not passage.strip() or quote.end > len(document) or len(passage) > MAX_QUOTE_CHARS:
            errors.append(
                FieldError(
                    quote.path,
                    f"characters {quote.start}-{quote.end} are not a passage of the document "
                    f"(it has {len(document)}; a quote holds 1-{MAX_QUOTE_CHARS} of them)",
                )
            )
            continue
        value = _at(after, quote.path)
        support = (
            Support.SUPPORTED
            if value is not _MISSING and value_in_quote(value, passage)
            else Support.VALUE_NOT_IN_QUOTE
        )
        record.update(
            quote=passage,
            start=quote.start,
            end=quote.end,
            page=page_of(page_starts, quote.start),
            section=None,
            section_title=None,
            supported=support is Support.SUPPORTED,
            support=support.value,
            quoted_by=reviewer,
        )
        record.pop("boxes", None)
    if errors:
        raise EditError(errors)
    return after


class _PointerError(Exception):
    pass


def _tokens(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise _PointerError("a path is a JSON Pointer such as /fields/total/amount")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _pointer(path: Sequence[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _at(document: Any, pointer: str) -> Any:
    here = document
    for token in _tokens(pointer):
        if isinstance(here, Mapping) and token in here:
            here = here[token]
        elif isinstance(here, list) and token.isdigit() and int(token) < len(here):
            here = here[int(token)]
        else:
            return _MISSING
    return here


def _apply(document: dict[str, Any], edit: Edit) -> None:
    *parents, last = _tokens(edit.path)
    container: Any = document
    for token in parents:
        container = _child(container, token)
    if edit.action == "confirm":
        _child(container, last)
    elif edit.action == "correct":
        if isinstance(container, dict):
            container[last] = edit.value
        else:
            container[_index(container, last)] = edit.value
    elif isinstance(container, dict):
        if last not in container:
            raise _PointerError("there is no value here to clear")
        del container[last]
    else:
        del container[_index(container, last)]


def _child(container: Any, token: str) -> Any:
    if isinstance(container, dict):
        if token not in container:
            raise _PointerError(f"the output has no value {token!r} here")
        return container[token]
    return container[_index(container, token)]


def _index(container: Any, token: str) -> int:
    if not isinstance(container, list):
        raise _PointerError(f"{token!r} goes inside a value that holds nothing")
    if not token.isdigit() or int(token) >= len(container):
        raise _PointerError(f"no item {token} in a list of {len(container)}")
    return int(token)


def _diff(before: Any, after: Any, path: str, changes: list[dict[str, Any]]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in dict.fromkeys([*before, *after]):
            here = path + _pointer([key])
            if key not in after:
                changes.append(
                    {"path": here, "change": "removed", "before": before[key], "after": None}
                )
            elif key not in before:
                changes.append(
                    {"path": here, "change": "added", "before": None, "after": after[key]}
                )
            else:
                _diff(before[key], after[key], here, changes)
    elif isinstance(before, list) and isinstance(after, list):
        for i in range(max(len(before), len(after))):
            here = f"{path}/{i}"
            if i >= len(after):
                changes.append(
                    {"path": here, "change": "removed", "before": before[i], "after": None}
                )
            elif i >= len(before):
                changes.append({"path": here, "change": "added", "before": None, "after": after[i]})
            else:
                _diff(before[i], after[i], here, changes)
    elif before != after or type(before) is not type(after):
        changes.append({"path": path or "/", "change": "changed", "before": before, "after": after})
