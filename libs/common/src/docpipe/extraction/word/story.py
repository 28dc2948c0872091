"""The text of a Word story (the body, a header, a note, a text box, a table cell) as a
reader sees it:

- paragraphs with their list labels (:mod:`numbering`); runs as they stand once tracked
  changes are accepted: insertions and moves in (``w:ins``, ``w:moveTo``), deletions out
  (``w:del``, ``w:moveFrom``, deleted table rows); hidden runs (``w:vanish``) out;
- content controls (``w:sdt``), custom XML, smart tags, hyperlinks and field results read
  through; a control still showing its placeholder ("Click here to enter text") is not;
- text boxes and shapes (``w:txbxContent``), after the text of the paragraph that anchors
  them. Word stores a shape twice, as DrawingML (``mc:Choice``) and as VML for older
  readers (``mc:Fallback``): the first choice is read, the fallback only when there is no
  choice;
- tables row by row, a row's cells joined by `` | ``, one cell per grid column: a merged
  cell's text stands in every column and row it spans, so each row lines up with the
  header above it; a table nested in a cell is written inline as ``[row; row]``;
- equations as linear text (:mod:`omml`); footnote and endnote references as ``[1]``,
  their notes collected by :class:`Notes` for the reader to place.

A page break (``w:br w:type="page"``, ``w:pageBreakBefore``) is a form feed in a body
paragraph's text; the reader splits pages there.

Bounded: text boxes per document and nesting (tables in cells, boxes in boxes) past
``MAX_TEXT_BOXES`` / ``MAX_NESTING``, and a cell spanning more columns than a Word table has
(``MAX_GRID_COLUMNS``), are ``too_complex``. Every character written is spent from the
document's :class:`~docpipe.extraction.pages.TextBudget` as it is written, a repeated text
once per repeat (a cell in each column it spans and each row it is merged into), so a file
that multiplies its text ends ``too_much_text`` at the bound, not in a worker's memory. A
note is written once, where it is first referenced (a later reference repeats its mark); a
note referenced inside a note is written after it, never inside it, so chains of notes and
notes that cite themselves cost what their XML costs. Reading stops (``too_slow``) once the
time it may take is up.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from lxml import etree

from docpipe.extraction.limits import TextBudget, too_slow
from docpipe.extraction.word.numbering import Numbering, format_number
from docpipe.extraction.word.omml import linear_math
from docpipe.extraction.word.package import MC, M, W, too_complex

__all__ = ["MAX_GRID_COLUMNS", "MAX_NESTING", "MAX_TEXT_BOXES", "PAGE_BREAK", "Notes", "Story"]

# Word files nest tables a few levels deep and hold tens, at most hundreds, of shapes;
# past these a file is built to exhaust the reader, not to be read.
MAX_NESTING = 32
MAX_TEXT_BOXES = 2000
# Word's tables have at most 63 columns: a span (or a row's offset) past it is no table.
MAX_GRID_COLUMNS = 63
PAGE_BREAK = "\f"
# " | " between a row's cells: what a repeated cell adds besides its text.
_CELL_SEPARATOR = " | "

_OFF = ("0", "false", "off")
# Inline containers whose runs are read as if they stood in the paragraph.
_READ_THROUGH = {
    W + t
    for t in ("ins", "moveTo", "hyperlink", "smartTag", "customXml", "fldSimple", "dir", "bdo")
}
_MATH = {M + "oMath", M + "oMathPara"}
_TEXT_BOX = W + "txbxContent"


@dataclass
class Notes:
    """Footnotes and endnotes in the order they are referenced, numbered as Word does by
    default (footnotes 1, 2, 3; endnotes i, ii, iii, unless settings.xml says otherwise)."""

    footnotes: dict[str, etree._Element]
    endnotes: dict[str, etree._Element]
    footnote_format: str = "decimal"
    endnote_format: str = "lowerRoman"
    footnote_texts: list[str] = field(default_factory=list)
    endnote_texts: list[str] = field(default_factory=list)
    # Each note's mark once given, by kind and id: a later reference repeats it.
    marks: dict[tuple[bool, str], str] = field(default_factory=dict)
    counted: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})


@dataclass(frozen=True)
class _PendingNote:
    texts: list[str]  # where its text goes ...
    at: int  # ... at this place
    mark: str
    note: etree._Element


class Story:
    """Reads stories of one document, sharing its list counters, notes and bounds:
    ``budget`` (characters), ``deadline`` (time.monotonic(); None: none)."""

    def __init__(
        self,
        numbering: Numbering,
        notes: Notes,
        budget: TextBudget,
        *,
        deadline: float | None = None,
    ) -> None:
        self._numbering = numbering
        self.notes = notes
        self._budget = budget
        self._deadline = deadline
        self._text_boxes = 0
        self._pending_notes: deque[_PendingNote] = deque()
        self._writing_notes = False

    def blocks(self, container: etree._Element, depth: int = 0) -> Iterator[str]:
        """The text of each block (paragraph, table) in ``container``, in order; blocks
        that have no text are left out."""
        if depth > MAX_NESTING:
            raise too_complex(f"tables or text boxes nested more than {MAX_NESTING} deep")
        for child in container:
            self.check_time()
            yield from self.block(child, depth)

    def check_time(self) -> None:
        """too_slow once the reading's deadline has passed."""
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise too_slow(
                "reading the Word file took longer than its step may take "
                "(DOCPIPE_TASK_SOFT_TIME_LIMIT_S)"
            )

    def block(self, block: etree._Element, depth: int = 0) -> Iterator[str]:
        """The text of one block (empty for blocks without text)."""
        tag = block.tag
        if tag == W + "p":
            yield from self._paragraph(block, depth)
        elif tag == W + "tbl":
            rows = self._table_rows(block, depth)
            if rows:
                yield "\n".join(rows)
        elif tag == W + "sdt":
            content = _control_content(block)
            if content is not None:
                yield from self.blocks(content, depth)
        elif tag in (W + "customXml", W + "ins", W + "moveTo"):
            yield from self.blocks(block, depth)
        elif tag == MC + "AlternateContent":
            chosen = _choice(block)
            if chosen is not None:
                yield from self.blocks(chosen, depth)

    def _paragraph(self, paragraph: etree._Element, depth: int) -> Iterator[str]:
        """The paragraph's text (page breaks before it first, then its label), then the
        text of the boxes anchored in it."""
        properties = paragraph.find(W + "pPr")
        label = self._numbering.label(properties)
        parts: list[str] = []
        boxes: list[etree._Element] = []
        if properties is not None and _on(properties.find(W + "pageBreakBefore")):
            parts.append(PAGE_BREAK)
        self._inline(paragraph, parts, boxes)
        whole = "".join(parts)
        text = whole.lstrip(" \t\n" + PAGE_BREAK)
        breaks = whole[: len(whole) - len(text)].count(PAGE_BREAK)
        text = text.rstrip(" \t\n")
        if text or breaks:
            written = PAGE_BREAK * breaks + (label + text if text else "")
            self._budget.spend(len(written))
            yield written
        for box in boxes:
            self._text_boxes += 1
            if self._text_boxes > MAX_TEXT_BOXES:
                raise too_complex(f"more than {MAX_TEXT_BOXES} text boxes and shapes")
            yield from self.blocks(box, depth + 1)

    def _inline(self, element: etree._Element, out: list[str], boxes: list[etree._Element]) -> None:
        for child in element:
            tag = child.tag
            if tag == W + "r":
                self._run(child, out, boxes)
            elif tag in _READ_THROUGH:
                self._inline(child, out, boxes)
            elif tag == W + "sdt":
                content = _control_content(child)
                if content is not None:
                    self._inline(content, out, boxes)
            elif tag in _MATH:
                out.append(linear_math(child))
            elif tag == MC + "AlternateContent":
                chosen = _choice(child)
                if chosen is not None:
                    self._inline(chosen, out, boxes)

    def _run(self, run: etree._Element, out: list[str], boxes: list[etree._Element]) -> None:
        properties = run.find(W + "rPr")
        if properties is not None and _on(properties.find(W + "vanish")):
            return
        for child in run:
            tag = child.tag
            if tag == W + "t":
                out.append(child.text or "")
            elif tag in (W + "tab", W + "ptab"):
                out.append("\t")
            elif tag == W + "br":
                out.append(PAGE_BREAK if child.get(W + "type") == "page" else "\n")
            elif tag == W + "cr":
                out.append("\n")
            elif tag == W + "noBreakHyphen":
                out.append("-")
            elif tag == W + "sym":
                out.append(_symbol(child.get(W + "char", "")))
            elif tag == W + "footnoteReference":
                out.append(self._note_mark(child, footnote=True))
            elif tag == W + "endnoteReference":
                out.append(self._note_mark(child, footnote=False))
            elif tag == W + "ruby":
                base = child.find(W + "rubyBase")
                if base is not None:
                    self._inline(base, out, boxes)
            elif tag in (W + "drawing", W + "pict", MC + "AlternateContent", W + "object"):
                boxes.extend(_text_boxes(child))

    def _note_mark(self, reference: etree._Element, *, footnote: bool) -> str:
        """The reference's mark; the note's text is written once, at its first reference
        (in order: a note referenced inside this one comes after it)."""
        notes = self.notes
        note_id = reference.get(W + "id", "")
        found = (notes.footnotes if footnote else notes.endnotes).get(note_id)
        if found is None:
            return ""
        mark = notes.marks.get((footnote, note_id))
        if mark is None:
            notes.counted[footnote] += 1
            fmt = notes.footnote_format if footnote else notes.endnote_format
            mark = notes.marks[(footnote, note_id)] = format_number(notes.counted[footnote], fmt)
            texts = notes.footnote_texts if footnote else notes.endnote_texts
            texts.append("")  # its place, so a note referenced inside this one counts after it
            self._pending_notes.append(_PendingNote(texts, len(texts) - 1, mark, found))
            if not self._writing_notes:
                self._write_pending_notes()
        custom = reference.get(W + "customMarkFollows") not in (None, *_OFF)
        return "" if custom else f"[{mark}]"

    def _write_pending_notes(self) -> None:
        """Each note waiting to be written, in order; one a note references waits for the
        note to end (no note is read inside another: no recursion, whatever the chain)."""
        self._writing_notes = True
        try:
            while self._pending_notes:
                pending = self._pending_notes.popleft()
                body = " ".join(b.replace(PAGE_BREAK, " ") for b in self.blocks(pending.note, 1))
                pending.texts[pending.at] = f"[{pending.mark}] {' '.join(body.split())}"
        finally:
            self._writing_notes = False

    def _table_rows(self, table: etree._Element, depth: int) -> list[str]:
        rows: list[str] = []
        merged_above: dict[int, str] = {}  # grid column -> text of the cell merging down
        for row in _parts(table, W + "tr"):
            cells: list[str] = []
            row_properties = row.find(W + "trPr")
            if row_properties is not None:
                if row_properties.find(W + "del") is not None:
                    continue  # a deleted row, the change accepted
                before = _columns(row_properties.find(W + "gridBefore"), 0, "starts")
                self._budget.spend(before * len(_CELL_SEPARATOR))
                cells += [""] * before
            for cell in _parts(row, W + "tc"):
                cell_properties = cell.find(W + "tcPr")
                span = _columns(_child(cell_properties, "gridSpan"), 1, "spans")
                merge = _child(cell_properties, "vMerge")
                column = len(cells)
                if merge is not None and merge.get(W + "val", "continue") == "continue":
                    text = merged_above.get(column, "")
                    copies = span  # the text above, written again in this row
                else:
                    text = self._cell_text(cell, depth + 1)
                    copies = span - 1  # the text itself was spent as it was written
                    if merge is not None:
                        merged_above[column] = text
                    else:
                        merged_above.pop(column, None)
                self._budget.spend(copies * (len(text) + len(_CELL_SEPARATOR)))
                cells += [text] * span
            if any(cells):
                rows.append(" | ".join(cells))
        return rows

    def _cell_text(self, cell: etree._Element, depth: int) -> str:
        if depth > MAX_NESTING:
            raise too_complex(f"tables or text boxes nested more than {MAX_NESTING} deep")
        parts = []
        for child in cell:
            if child.tag == W + "tbl":  # inline, so the outer row stays one line
                nested = self._table_rows(child, depth)
                if nested:
                    parts.append("[" + "; ".join(nested) + "]")
            else:
                parts.extend(self.block(child, depth))
        return " ".join(" ".join(p.replace(PAGE_BREAK, " ").split()) for p in parts)


def _parts(element: etree._Element, tag: str) -> Iterator[etree._Element]:
    """The children of ``element`` that are ``tag`` (a table's rows, a row's cells), with
    content controls and custom XML around them read through."""
    for child in element:
        if child.tag == tag:
            yield child
        elif child.tag in (W + "sdt", W + "customXml"):
            content = _control_content(child) if child.tag == W + "sdt" else child
            if content is not None:
                yield from _parts(content, tag)


def _text_boxes(element: etree._Element) -> Iterator[etree._Element]:
    """The outermost text boxes inside a drawing, a VML shape or a group of them; of each
    mc:AlternateContent, only the branch :func:`_choice` picks."""
    if element.tag == MC + "AlternateContent":
        chosen = _choice(element)
        if chosen is not None:
            yield from _text_boxes(chosen)
        return
    for child in element:
        if child.tag == _TEXT_BOX:
            yield child
        elif isinstance(child.tag, str):
            yield from _text_boxes(child)


def _choice(alternate: etree._Element) -> etree._Element | None:
    """The first mc:Choice (Word's DrawingML shapes, Office 2010 features), else the
    fallback. docpipe reads text, which every choice Word writes carries."""
    choice = alternate.find(MC + "Choice")
    return choice if choice is not None else alternate.find(MC + "Fallback")


def _control_content(control: etree._Element) -> etree._Element | None:
    properties = control.find(W + "sdtPr")
    if properties is not None and _on(properties.find(W + "showingPlcHdr")):
        return None  # the placeholder Word shows until someone fills the control in
    return control.find(W + "sdtContent")


def _child(properties: etree._Element | None, name: str) -> etree._Element | None:
    return None if properties is None else properties.find(W + name)


def _on(toggle: etree._Element | None) -> bool:
    return toggle is not None and toggle.get(W + "val", "1") not in _OFF


def _int_val(element: etree._Element | None, default: int) -> int:
    try:
        return int(element.get(W + "val", default)) if element is not None else default
    except ValueError:
        return default


def _columns(element: etree._Element | None, default: int, what: str) -> int:
    """A count of grid columns (a cell's span, a row's offset), at least ``default``;
    too_complex past what a Word table holds."""
    columns = _int_val(element, default)
    if columns > MAX_GRID_COLUMNS:
        raise too_complex(
            f"a table cell {what} {columns} grid columns (a Word table has at most "
            f"{MAX_GRID_COLUMNS})"
        )
    return max(columns, default)


def _symbol(code: str) -> str:
    """A w:sym's character; symbol fonts' private-use code points stand for no letter."""
    try:
        char = chr(int(code, 16))
    except (ValueError, OverflowError):  # past Unicode, or past any C integer
        return ""
    return "" if "\ue000" <= char <= "\uf8ff" else char
