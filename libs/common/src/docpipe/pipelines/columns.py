"""A pipeline's results as table columns: the header of the CSV and XLSX exports, known
before their first row.

The columns come from the output schemas of the pipeline's own steps (docpipe's
``extract_text`` is left out: its output is the document's, not a result), in step order.
Each has a path, ``<step>.<property>.<property>...``, and a title a person reads: the
schema's ``title`` of each level, else its name in words ("total_value" is "Total value"),
the last levels only, as few as tell it apart from every other column ("Total value:
amount" beside "Liability cap: amount", "Parties").

- a scalar (string, number, integer, boolean, null, an enum or a choice of them) is one
  column;
- an object with ``properties`` is flattened into its properties, in the schema's order;
- an array is one column, its items joined with ``"; "``, an object item as its first
  value and the others in brackets: "Acme Ltd (supplier); Borealis SAS (customer)";
- an object whose keys the schema leaves open is one column, "key: value; key: value";
- a value of any other shape is one column holding its JSON.

A step's ``evidence`` (docpipe.pipelines.evidence) is no column of values: the exports give
it in evidence columns of their own when asked (:func:`evidence_cells`), after the values
its records may point at (``Step.evidence_at``) and no other, and name it among the fields
left out (:class:`Omitted`) otherwise, or when its records point inside lists, where no
cell holds a quote per item.

Pure functions of the pipeline's definition and a run's outputs: no database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from docpipe.pipelines.evidence import evidence_records, support_label
from docpipe.pipelines.model import Pipeline
from docpipe.pipelines.text_extraction import EXTRACT_TEXT_STEP

__all__ = [
    "CUT_MARK",
    "CUT_MARK_END",
    "JOINER",
    "MAX_CELL_CHARS",
    "Column",
    "Columns",
    "EvidenceGroup",
    "Omitted",
    "cell_text",
    "evidence_by_path",
    "evidence_cells",
    "field_title",
    "readable_value",
    "result_columns",
]

JOINER = "; "
# The most characters a spreadsheet cell holds (Excel's limit, and XLSX's): a longer text
# is cut in a workbook, its end saying so (the CLI counts the marks; the JSON lines hold
# the whole text).
MAX_CELL_CHARS = 32_767
CUT_MARK = " … [cut: {chars:,} characters; the JSON lines hold it whole]"
CUT_MARK_END = "characters; the JSON lines hold it whole]"
_SCALARS = frozenset({"string", "number", "integer", "boolean", "null"})
# A spreadsheet runs a cell that starts with one of these as a formula; the documents and
# the models' answers are nobody's to trust, so such a text cell starts with a quote mark
# (OWASP's advice on CSV injection) and shows as the text it is.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_EVIDENCE = "evidence"
_EVIDENCE_WHY = "the values' evidence: ask for evidence=true, docpipe batch results --evidence"
_ITEMS_EVIDENCE_WHY = (
    "the evidence of values inside a list, a quote per item: in the JSON lines and in "
    "format=xlsx's evidence sheet"
)


@dataclass(frozen=True)
class Column:
    """One column: the value at ``path`` in ``step``'s output."""

    name: str  # the path, dotted: extract_fields.fields.total_value.amount
    title: str  # what a person reads: Total value: amount
    step: str
    path: tuple[str, ...]
    # Where the step records evidence: the value's group (an object's properties share
    # the quote of the object), the group's title, whether this column ends the group
    # (its evidence columns follow it) and the paths in it.
    evidence: EvidenceGroup | None = None

    def value(self, outputs: Mapping[str, Any]) -> Any:
        """The value of a run whose step outputs are ``outputs``; None when missing."""
        value: Any = outputs.get(self.step)
        for key in self.path:
            if not isinstance(value, Mapping):
                return None
            value = value.get(key)
        return value

    def cell(self, outputs: Mapping[str, Any]) -> str:
        """The value as a CSV cell (:func:`cell_text` of :func:`readable_value`)."""
        return cell_text(readable_value(self.value(outputs)))

    def pointer(self) -> str:
        """The value's JSON Pointer in its step's output (an evidence record's ``path``)."""
        return "/" + "/".join(self.path)


@dataclass(frozen=True)
class EvidenceGroup:
    """Values whose evidence is one record: a value, or the properties of an object."""

    title: str
    path: tuple[str, ...]
    members: tuple[tuple[str, ...], ...]
    last: bool  # the column it is given to ends the group


@dataclass(frozen=True)
class Omitted:
    """A field no column holds, and why."""

    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.name} ({self.why})"


@dataclass(frozen=True)
class Columns:
    columns: tuple[Column, ...]
    omitted: tuple[Omitted, ...]  # the evidence, when its columns are not asked for
    evidence: bool = False  # asked for: evidence columns follow the values a step supports


def result_columns(
    pipeline: Pipeline, *, evidence: bool = False, taken: Iterable[str] = ()
) -> Columns:
    """The columns of ``pipeline``'s results, titled apart from each other and from the
    ``taken`` titles (the exports' own columns); the steps' evidence lists are left out,
    and named so unless ``evidence`` (the export then has evidence columns)."""
    found: list[tuple[str, tuple[str, ...], tuple[str, ...], bool]] = []
    omitted: list[Omitted] = []
    evidence_at = {each.name: each.evidence_at for each in pipeline.steps}
    for each in pipeline.steps:
        if each is EXTRACT_TEXT_STEP:
            continue
        schema = each.output_schema
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        records = isinstance(properties, Mapping) and _kind(properties.get(_EVIDENCE)) == {"array"}
        for path, titles in _flatten(schema, (), ()):
            if records and path == (_EVIDENCE,):
                if not evidence:
                    omitted.append(Omitted(f"{each.name}.{_EVIDENCE}", _EVIDENCE_WHY))
                continue
            found.append((each.name, path, (_words(each.name), *titles), records))
    columns = [
        Column(".".join((step, *path)), title, step, path)
        for (step, path, _, _), title in zip(
            found, _titles([t for _, _, t, _ in found], taken), strict=True
        )
    ]
    groups: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for index, (step, path, _, records) in enumerate(found):
        if records:
            # A property of an object within the output: the object's evidence is its own.
            groups.setdefault((step, path[:-1] if len(path) >= 3 else path), []).append(index)
    quoted_steps: set[str] = set()
    for (step, path), members in groups.items():
        group = EvidenceGroup("", path, tuple(columns[m].path for m in members), last=False)
        if not _may_have_record(group, evidence_at[step]):
            continue  # an empty quote, page and evidence in every row would say nothing
        quoted_steps.add(step)
        first = columns[members[0]].title
        title = first if len(members) == 1 else _group_title(first, path)
        for index in members:
            columns[index] = replace(
                columns[index], evidence=replace(group, title=title, last=index == members[-1])
            )
    if evidence:
        omitted += [
            Omitted(f"{step}.{_EVIDENCE}", _ITEMS_EVIDENCE_WHY)
            for step in dict.fromkeys(step for step, _, _, records in found if records)
            if step not in quoted_steps
        ]
    return Columns(tuple(columns), tuple(omitted), evidence)


def _record_paths(group: EvidenceGroup) -> Iterator[tuple[str, ...]]:
    """Where a record that speaks for ``group`` may point, in the order it is looked for:
    at a value of the group, at the group's object, at the nearest value holding it."""
    yield from group.members
    yield from (group.path[:size] for size in range(len(group.path), 0, -1))


def _may_have_record(group: EvidenceGroup, evidence_at: str | None) -> bool:
    """Whether a record where the step's records point (``evidence_at``: a JSON Pointer
    with ``*`` for any one key; None: anywhere) may speak for ``group``."""
    if evidence_at is None:
        return True
    wanted = evidence_at.split("/")[1:]
    return any(
        len(path) == len(wanted) and all(w in ("*", p) for w, p in zip(wanted, path, strict=True))
        for path in _record_paths(group)
    )


def _group_title(member_title: str, path: tuple[str, ...]) -> str:
    head, colon, _ = member_title.rpartition(": ")
    return head if colon else _joined((_words(path[-1]),))


def _flatten(
    schema: Any, path: tuple[str, ...], titles: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(path, titles) of each column under ``schema``: an object's properties flattened,
    anything else one column."""
    if isinstance(schema, Mapping) and _is_object(schema):
        properties: Mapping[str, Any] = schema.get("properties") or {}
        if properties and schema.get("additionalProperties") in (None, False, {}):
            for key, sub in properties.items():
                yield from _flatten(sub, (*path, key), (*titles, _title(key, sub)))
            return
    yield path, titles


def _titles(paths: Sequence[tuple[str, ...]], taken: Iterable[str]) -> list[str]:
    """Each path of titles as its shortest ending that no other path ends with and that is
    no ``taken`` title (the whole path with its step's name if it comes to that)."""
    taken_keys = {t.casefold() for t in taken}
    chosen = []
    for i, path in enumerate(paths):
        for size in range(1, len(path) + 1):
            ending = path[-size:]
            clash = any(
                j != i and other[-size:] == ending and len(other) >= size
                for j, other in enumerate(paths)
            )
            text = _joined(ending)
            if size == len(path) or not (clash or text.casefold() in taken_keys):
                break
        chosen.append(text)
    return chosen


def _joined(titles: tuple[str, ...]) -> str:
    first, *rest = titles
    return ": ".join([first[:1].upper() + first[1:], *rest])


def _title(key: str, schema: Any) -> str:
    if isinstance(schema, Mapping) and isinstance(schema.get("title"), str) and schema["title"]:
        return str(schema["title"])
    return _words(key)


def field_title(name: str) -> str:
    """An evidence record's field as words: "total_value" is "Total value"."""
    return _joined((_words(name),))


def _words(key: str) -> str:
    return key.replace("_", " ").strip() or key


def _kind(schema: Any) -> set[str]:
    """The JSON types ``schema`` declares, null aside (a null value is an empty cell)."""
    declared = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(declared, str):
        declared = [declared]
    if not isinstance(declared, Sequence):
        return set()
    return {str(t) for t in declared} - {"null"}


def _is_object(schema: Mapping[str, Any]) -> bool:
    return _kind(schema) == {"object"} or ("type" not in schema and "properties" in schema)


def readable_value(value: Any) -> Any:
    """A value as a spreadsheet cell holds it: a scalar as it is, a list its items joined
    with ``"; "``, an object its values (the first, then the others in brackets:
    "Acme Ltd (supplier)"), an object whose keys are data "key: value; ..."; what is nested
    deeper, as JSON."""
    if isinstance(value, list):
        return JOINER.join(_item_text(item) for item in value)
    if isinstance(value, Mapping):
        return _object_text(value)
    return value


def _item_text(item: Any) -> str:
    if isinstance(item, Mapping):
        values = [_scalar_text(v) for v in item.values() if v not in (None, "", [], {})]
        if not values:
            return ""
        first, *rest = values
        return f"{first} ({', '.join(rest)})" if rest else first
    return _scalar_text(item)


def _object_text(value: Mapping[str, Any]) -> str:
    return JOINER.join(f"{k}: {_scalar_text(v)}" for k, v in value.items() if v is not None)


def _scalar_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def evidence_by_path(outputs: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A run's evidence records by ``<step>:<path>``, for :func:`evidence_cells`."""
    return {
        f"{step}:{record['path']}": record
        for step, output in outputs.items()
        if isinstance(output, Mapping)
        for record in evidence_records({step: output})
        if isinstance(record.get("path"), str)
    }


def evidence_cells(
    column: Column, records: Mapping[str, Mapping[str, Any]]
) -> tuple[str | None, int | None, str | None]:
    """(quote, page, what the evidence says) for ``column``'s evidence group, from the
    run's evidence ``records`` by path: the record of a value of the group, of the group's
    object, or of the nearest value holding it; Nones when no record speaks for it. A
    corrected value says who corrected it, and shows no quote of the model's."""
    group = column.evidence
    if group is None:
        return None, None, None
    for path in _record_paths(group):
        record = records.get(f"{column.step}:/{'/'.join(path)}")
        if record is not None:
            label = support_label(record)
            if record.get("corrected"):
                return None, None, label
            return record.get("quote"), record.get("page"), label
    return None, None, None


def cell_text(value: Any) -> str:
    """``value`` as a CSV cell: empty for null, JSON for what is not a scalar, a text that a
    spreadsheet would run as a formula behind a quote mark."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, str):
        return f"'{value}" if value.startswith(_FORMULA_STARTS) else value
    # Not the shape the schema declared (an output that went to review for breaking it).
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
