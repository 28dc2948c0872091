"""DOCX: the whole of a Word file as a reader sees it, in reading order, split into pages at
explicit page breaks (Word lays pages out itself; a DOCX stores no other page boundary).

What is read (:mod:`docpipe.extraction.word.story` has the details): paragraphs with their
list numbers and bullets; tables, nested ones and lists inside cells; text boxes and
shapes; content controls; tracked changes as accepted; equations as linear text; footnotes
at the end of the page that cites them, endnotes at the end of the document; headers and
footers once each, marked ``[header]`` / ``[footer]``, at the start of the first page and
the end of the last. "Strict Open XML" files read like the usual ones.

Why the document's XML (lxml) and not python-docx or a converter: python-docx reaches
paragraphs and tables of the body only (no text boxes, content controls, insertions, notes,
list numbers or equations) and refuses Strict files; mammoth and docx2python each miss
some of these (headers, equations, Strict) and give no bounds on what a hostile file makes
them build. The XML is a few hundred lines to read in full, and lets the reader stream the
body a block at a time (memory stays at one paragraph or table of a long document).

Bounds: the zip is checked (:mod:`zipguard`) before any part is opened, each part's size
before it is parsed; pages, text boxes and nesting have caps (``too_many_pages``,
``too_complex``); the text, repeats included, is counted while it is written
(``too_much_text``); the whole reading has a deadline (``too_slow``). It happens once, when
the reader is opened: the driver opens one reader per delivery of its step.
"""

from __future__ import annotations

import io
import time
import zipfile

from lxml import etree

from docpipe.extraction.failures import as_unreadable
from docpipe.extraction.limits import TextBudget
from docpipe.extraction.pages import PageLimits, PageText
from docpipe.extraction.word.numbering import Numbering
from docpipe.extraction.word.package import R, W, WordPackage, corrupt
from docpipe.extraction.word.story import PAGE_BREAK, Notes, Story
from docpipe.extraction.zipguard import ZipBounds, check_actual_sizes

__all__ = ["DocxReader"]

_SEPARATOR_NOTES = ("separator", "continuationSeparator", "continuationNotice")


class DocxReader:
    """An opened DOCX: its pages' text, read at once (no OCR, so nothing to memoise per page
    beyond what the driver does for every format). ``deadline``: the time.monotonic() by
    which the reading must end (None: no limit)."""

    def __init__(
        self,
        data: bytes,
        limits: PageLimits,
        bounds: ZipBounds,
        *,
        deadline: float | None = None,
    ) -> None:
        started = time.monotonic()
        check_actual_sizes(data, bounds)
        try:
            with as_unreadable("the Word file"), zipfile.ZipFile(io.BytesIO(data)) as archive:
                package = WordPackage(archive, max_part_bytes=limits.max_part_bytes)
                self._pages = _pages_of(package, limits, deadline)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise corrupt(f"the DOCX is damaged ({exc})") from None
        self.page_count = len(self._pages)
        self._seconds = (time.monotonic() - started) / max(self.page_count, 1)

    def close(self) -> None:
        self._pages = []

    def read_page(self, index: int, *, deadline: float | None = None) -> PageText:
        """Page ``index``, read when the file was opened (within the deadline it had)."""
        return PageText(index, self._pages[index], ocr=False, seconds=self._seconds)


def _pages_of(package: WordPackage, limits: PageLimits, deadline: float | None) -> list[str]:
    notes = _notes(package)
    story = Story(
        Numbering(package.part_of_type("numbering"), package.part_of_type("styles")),
        notes,
        TextBudget(limits.max_document_chars),
        deadline=deadline,
    )
    pages: list[list[str]] = [[]]
    footnotes: dict[int, list[str]] = {}  # page -> the notes its blocks cite
    furniture: list[str] = []  # the header and footer parts the sections name
    last_written = 0
    for block in package.body_blocks():
        story.check_time()
        for properties in _section_properties(block):
            furniture += _furniture_parts(package, properties)
        for text in story.block(block):
            first, *after_breaks = text.split(PAGE_BREAK)
            last_written = _append(pages, first, last_written)
            for piece in after_breaks:
                pages.append([])
                limits.check_page_count(len(pages))
                last_written = _append(pages, piece, last_written)
        footnotes.setdefault(last_written, []).extend(notes.footnote_texts)
        notes.footnote_texts.clear()
    if len(pages) > 1 and not pages[-1]:
        pages.pop()  # a break at the very end starts no page
    for page, cited in footnotes.items():
        pages[page] += cited
    pages[-1] += notes.endnote_texts
    headers, footers = _furniture(package, story, furniture)
    pages[0][:0] = headers
    pages[-1] += footers
    return ["\n\n".join(blocks) for blocks in pages]


def _append(pages: list[list[str]], text: str, last_written: int) -> int:
    """Add ``text`` to the last page; the index of the last page written to."""
    if not text.strip():
        return last_written
    pages[-1].append(text.strip())
    return len(pages) - 1


def _section_properties(block: etree._Element) -> list[etree._Element]:
    if block.tag == W + "sectPr":
        return [block]
    return list(block.iterfind(f"{W}pPr/{W}sectPr"))


def _furniture_parts(package: WordPackage, section: etree._Element) -> list[str]:
    names = []
    for kind in ("header", "footer"):
        for reference in section.iterfind(f"{W}{kind}Reference"):
            target = package.target(reference.get(R + "id", ""))
            if target is not None:
                names.append(f"{kind}:{target}")
    return names


def _furniture(package: WordPackage, story: Story, parts: list[str]) -> tuple[list[str], list[str]]:
    """Each header's and footer's text once (several sections, or a first-page and a
    default header, often repeat the same one), marked as such."""
    seen: set[tuple[str, str]] = set()
    found: dict[str, list[str]] = {"header": [], "footer": []}
    for kind, _, name in (p.partition(":") for p in dict.fromkeys(parts)):
        root = package.parse(name)
        if root is None:
            continue
        text = "\n".join(story.blocks(root, 1)).replace(PAGE_BREAK, "\n").strip()
        if text and (kind, text) not in seen:
            seen.add((kind, text))
            found[kind].append(f"[{kind}] {text}")
    return found["header"], found["footer"]


def _notes(package: WordPackage) -> Notes:
    settings = package.part_of_type("settings")
    notes = Notes(
        _notes_by_id(package.part_of_type("footnotes"), "footnote"),
        _notes_by_id(package.part_of_type("endnotes"), "endnote"),
    )
    if settings is not None:
        for kind in ("footnote", "endnote"):
            fmt = settings.find(f"{W}{kind}Pr/{W}numFmt")
            if fmt is not None and fmt.get(W + "val"):
                setattr(notes, f"{kind}_format", fmt.get(W + "val"))
    return notes


def _notes_by_id(part: etree._Element | None, kind: str) -> dict[str, etree._Element]:
    if part is None:
        return {}
    return {
        note.get(W + "id", ""): note
        for note in part.iterfind(W + kind)
        if note.get(W + "type") not in _SEPARATOR_NOTES
    }
