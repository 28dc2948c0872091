"""Scores of a step's output against the expected one, field by field.

Every scored field of a document ends in one outcome:

- ``correct``: expected and got, and they compare equal;
- ``wrong``: expected and got, and they differ;
- ``missing``: expected, but absent (or null) in what the step gave;
- ``extra``: given, but not expected;
- ``absent``: neither expected nor given (a true negative: counted by accuracy only).

Per field, and overall with each field's weight: precision = correct / (correct + wrong +
extra), recall = correct / (correct + wrong + missing), F1 their harmonic mean, accuracy =
(correct + absent) / all. The rows of a list are paired first (by the node's key, else by
the assignment that makes the most cells equal) and then scored cell by cell; an unpaired
expected row's cells are missing, an unpaired given row's extra.

Evidence is scored too: of the correct values that a step's evidence records cover (a
record whose ``path`` is the value's JSON pointer or one above it), the share whose records
all say ``supported``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from docpipe.evaluation.assignment import best_assignment
from docpipe.evaluation.comparators import ArrayNode, Leaf, Node, ObjectNode

__all__ = [
    "OUTCOMES",
    "Cell",
    "DocumentScore",
    "FieldScore",
    "Totals",
    "score_document",
    "summarise",
]

OUTCOMES = ("correct", "wrong", "missing", "extra", "absent")
WRONG_OUTCOMES = ("wrong", "missing", "extra")


@dataclass(frozen=True)
class Cell:
    """One scored value of one document: the field's path (``fields.parties[].name``), its
    JSON pointer in the output (``/fields/parties/1/name``), how it came out, and both
    values; ``supported``: its evidence (None: no record covers it)."""

    path: str
    pointer: str
    outcome: str
    expected: Any
    got: Any
    weight: float
    supported: bool | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "pointer": self.pointer,
            "outcome": self.outcome,
            "expected": self.expected,
            "got": self.got,
            "weight": self.weight,
            "supported": self.supported,
        }


@dataclass
class Totals:
    """Weighted counts of outcomes, and the measures they give."""

    correct: float = 0.0
    wrong: float = 0.0
    missing: float = 0.0
    extra: float = 0.0
    absent: float = 0.0
    evidenced: float = 0.0  # correct values some evidence record covers
    supported: float = 0.0  # ... whose records all say supported

    def add(self, cell: Cell) -> None:
        setattr(self, cell.outcome, getattr(self, cell.outcome) + cell.weight)
        if cell.outcome == "correct" and cell.supported is not None:
            self.evidenced += cell.weight
            self.supported += cell.weight if cell.supported else 0.0

    def merge(self, other: Totals) -> None:
        for name in (*OUTCOMES, "evidenced", "supported"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def total(self) -> float:
        return self.correct + self.wrong + self.missing + self.extra + self.absent

    @property
    def precision(self) -> float | None:
        return _share(self.correct, self.correct + self.wrong + self.extra)

    @property
    def recall(self) -> float | None:
        return _share(self.correct, self.correct + self.wrong + self.missing)

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        if p is None or r is None:
            return None
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    @property
    def accuracy(self) -> float | None:
        return _share(self.correct + self.absent, self.total)

    @property
    def evidence(self) -> float | None:
        return _share(self.supported, self.evidenced)

    def as_json(self) -> dict[str, Any]:
        counts = {name: _round(getattr(self, name)) for name in OUTCOMES}
        return counts | {
            "precision": _round(self.precision),
            "recall": _round(self.recall),
            "f1": _round(self.f1),
            "accuracy": _round(self.accuracy),
            "evidence": _round(self.evidence),
        }


@dataclass(frozen=True)
class FieldScore:
    path: str
    totals: Totals


@dataclass
class DocumentScore:
    """One document's cells, and its totals (its accuracy is what paired tests compare)."""

    cells: list[Cell]
    totals: Totals = field(default_factory=Totals)

    def __post_init__(self) -> None:
        for cell in self.cells:
            self.totals.add(cell)

    @property
    def accuracy(self) -> float:
        """The document's weighted share of fields right (1.0 when nothing is scored)."""
        measured = self.totals.accuracy
        return 1.0 if measured is None else measured

    def wrong_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.outcome in WRONG_OUTCOMES]


def score_document(
    tree: Node,
    expected: Any,
    got: Any,
    evidence: Sequence[Mapping[str, Any]] = (),
) -> DocumentScore:
    """Score ``got`` (a step's output) against ``expected`` along ``tree``."""
    covers = _evidence_index(evidence)
    cells = [
        _with_evidence(c, covers) if c.outcome == "correct" else c
        for c in _cells(tree, expected, got, "")
    ]
    return DocumentScore(cells)


def summarise(documents: Iterable[DocumentScore]) -> tuple[Totals, list[FieldScore]]:
    """The overall totals and each field's, fields in the order first seen."""
    overall = Totals()
    by_field: dict[str, Totals] = {}
    for document in documents:
        overall.merge(document.totals)
        for cell in document.cells:
            by_field.setdefault(cell.path, Totals()).add(cell)
    return overall, [FieldScore(path, totals) for path, totals in by_field.items()]


def _cells(node: Node, expected: Any, got: Any, pointer: str) -> Iterator[Cell]:
    if isinstance(node, Leaf):
        if node.compare == "none":
            return
        yield Cell(
            node.path, pointer or "/", _outcome(node, expected, got), expected, got, node.weight
        )
    elif isinstance(node, ObjectNode):
        exp = expected if isinstance(expected, Mapping) else {}
        have = got if isinstance(got, Mapping) else {}
        for name, child in node.properties.items():
            yield from _cells(child, exp.get(name), have.get(name), f"{pointer}/{_escape(name)}")
    else:
        yield from _rows(node, expected, got, pointer)


def _rows(node: ArrayNode, expected: Any, got: Any, pointer: str) -> Iterator[Cell]:
    exp = expected if isinstance(expected, list) else []
    have = got if isinstance(got, list) else []
    pairs = _pairs(node, exp, have)
    paired_got = {j for _, j in pairs}
    by_expected = dict(pairs)
    for i, row in enumerate(exp):
        j = by_expected.get(i)
        # A row is found where the step put it (the pointer names the output's row).
        yield from _cells(
            node.item, row, None if j is None else have[j], f"{pointer}/{i if j is None else j}"
        )
    for j, row in enumerate(have):
        if j not in paired_got:
            yield from _cells(node.item, None, row, f"{pointer}/{j}")


def _pairs(node: ArrayNode, expected: list[Any], got: list[Any]) -> list[tuple[int, int]]:
    if not expected or not got:
        return []
    if node.key is not None:
        key_leaf = _leaf_at(node.item, node.key)
        pairs, taken = [], set()
        for i, row in enumerate(expected):
            want = _value_at(row, node.key)
            for j, candidate in enumerate(got):
                have = _value_at(candidate, node.key)
                if (
                    j not in taken
                    and want is not None
                    and have is not None
                    and key_leaf.equal(want, have)
                ):
                    pairs.append((i, j))
                    taken.add(j)
                    break
        return pairs
    gain = [[_agreement(node.item, e, g) for g in got] for e in expected]
    return best_assignment(gain)


def _agreement(node: Node, expected: Any, got: Any) -> float:
    """How alike two rows are: the weight of their cells that come out correct."""
    return sum(c.weight for c in _cells(node, expected, got, "") if c.outcome == "correct")


def _outcome(leaf: Leaf, expected: Any, got: Any) -> str:
    if _empty(expected):
        return "absent" if _empty(got) else "extra"
    if _empty(got):
        return "missing"
    return "correct" if leaf.equal(expected, got) else "wrong"


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and not value)


def _leaf_at(node: Node, path: str) -> Leaf:
    for part in path.split("."):
        assert isinstance(node, ObjectNode), "field_tree checked the key"
        node = node.properties[part]
    assert isinstance(node, Leaf)
    return node


def _value_at(row: Any, path: str) -> Any:
    for part in path.split("."):
        row = row.get(part) if isinstance(row, Mapping) else None
    return row


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _evidence_index(evidence: Sequence[Mapping[str, Any]]) -> dict[str, list[bool]]:
    index: dict[str, list[bool]] = {}
    for record in evidence:
        path = record.get("path") if isinstance(record, Mapping) else None
        if isinstance(path, str):
            # A record of a file step points at the quoted object's value: /prop/key/value.
            at = path.removesuffix("/value")
            index.setdefault(at, []).append(record.get("supported") is True)
    return index


def _with_evidence(cell: Cell, covers: Mapping[str, list[bool]]) -> Cell:
    if not covers:
        return cell
    verdicts: list[bool] = []
    pointer = cell.pointer
    while pointer:
        verdicts += covers.get(pointer, [])
        pointer = pointer.rpartition("/")[0]
    if not verdicts:
        return cell
    return Cell(
        cell.path, cell.pointer, cell.outcome, cell.expected, cell.got, cell.weight, all(verdicts)
    )


def _share(part: float, whole: float) -> float | None:
    return None if whole == 0 else part / whole


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
