"""A Word file's parts: the main document found through the package's relationships, the
parts it names (headers, footers, notes, numbering, styles, settings), each parsed safely.

Files saved as "Strict Open XML" name their relationships and elements in other namespaces
(``http://purl.oclc.org/ooxml/...``) with the same local names; every parsed element is
renamed into the usual (transitional) namespaces, so the readers know one vocabulary.

Parsing never resolves entities or reaches the network, and keeps libxml2's depth limit
(256 levels): a document nested deeper is ``too_complex``, like one past the structural
bounds of :mod:`docpipe.extraction.word.story`. No part larger than ``max_part_bytes`` is
parsed (lxml holds about 10-20 times a part's size): it is ``too_complex`` before lxml
sees it. The sizes are the zip's own, checked against what its members really inflate to
(:func:`docpipe.extraction.zipguard.check_actual_sizes`) before the package is opened.
"""

from __future__ import annotations

import posixpath
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import IO

from lxml import etree

from docpipe.errors import UnreadableDocumentError

__all__ = [
    "MC",
    "M",
    "R",
    "W",
    "WordPackage",
    "corrupt",
    "too_complex",
]

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_PACKAGE_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_CONTENT_TYPES = "{http://schemas.openxmlformats.org/package/2006/content-types}"

_TRANSITIONAL_RELS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_STRICT_RELS = "http://purl.oclc.org/ooxml/officeDocument/relationships"
# Strict's namespaces and their transitional twins (ISO/IEC 29500-4, annex A).
_STRICT_TO_TRANSITIONAL = {
    "http://purl.oclc.org/ooxml/wordprocessingml/main": W[1:-1],
    _STRICT_RELS: R[1:-1],
    "http://purl.oclc.org/ooxml/officeDocument/math": M[1:-1],
    "http://purl.oclc.org/ooxml/drawingml/main": "http://schemas.openxmlformats.org/drawingml/2006/main",
    "http://purl.oclc.org/ooxml/drawingml/wordprocessingDrawing": (
        "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"
    ),
    "http://purl.oclc.org/ooxml/drawingml/picture": (
        "http://schemas.openxmlformats.org/drawingml/2006/picture"
    ),
}
# The main part's content types: a document, a template, either with macros.
_WORD_MAIN_TYPES = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
    "application/vnd.ms-word.document.macroEnabled.main+xml",
    "application/vnd.ms-word.template.macroEnabledTemplate.main+xml",
}
# Children of w:body that hold text; the main part is read one of them at a time.
_BODY_BLOCKS = tuple(W + t for t in ("p", "tbl", "sdt", "customXml", "sectPr"))


def corrupt(message: str) -> UnreadableDocumentError:
    return UnreadableDocumentError(message, kind="corrupt")


def too_complex(message: str) -> UnreadableDocumentError:
    return UnreadableDocumentError(message, kind="too_complex")


@dataclass(frozen=True)
class _Relationship:
    type: str  # the last segment of its type URI: "header", "footnotes", ...
    target: str  # a member name of the zip
    strict: bool  # named in Strict's namespace


class WordPackage:
    """An opened Word file (its zip already checked by zipguard): the main document's
    blocks one at a time, and the other parts by relationship."""

    def __init__(self, archive: zipfile.ZipFile, *, max_part_bytes: int) -> None:
        self._archive = archive
        self._max_part_bytes = max_part_bytes
        package_rels = self._relationships("_rels/.rels", source="")
        main = next((r for r in package_rels.values() if r.type == "officeDocument"), None)
        if main is None:
            raise corrupt("the package names no main document (_rels/.rels)")
        self.strict = main.strict
        self._check_content_type(main.target)
        self.main_part = main.target
        self._document_rels = self._relationships(_rels_of(main.target), source=main.target)

    def target(self, relationship_id: str) -> str | None:
        """The member a relationship of the main document points at, if it is inside."""
        found = self._document_rels.get(relationship_id)
        return None if found is None else found.target

    def part_of_type(self, rel_type: str) -> etree._Element | None:
        """The parsed part the main document relates to as ``rel_type`` ("numbering",
        "styles", "settings", "footnotes", "endnotes"), if it has one."""
        found = next((r for r in self._document_rels.values() if r.type == rel_type), None)
        return None if found is None else self.parse(found.target)

    def parse(self, name: str) -> etree._Element | None:
        """A whole part, in transitional names; None when the zip lacks it."""
        stream = self._open(name)
        if stream is None:
            return None
        with stream:
            root = _parse(stream, name)
        return self._renamed(root)

    def _open(self, name: str) -> IO[bytes] | None:
        """The member's stream (None when the zip lacks it), once its size is within the
        bound."""
        try:
            size = self._archive.getinfo(name).file_size
        except KeyError:
            return None
        if size > self._max_part_bytes:
            raise too_complex(
                f"{name[:100]} is {size} bytes of XML (at most {self._max_part_bytes}, "
                "DOCPIPE_DOCX_MAX_PART_BYTES)"
            )
        return self._archive.open(name)

    def body_blocks(self) -> Iterator[etree._Element]:
        """The main document's body, one child (paragraph, table, content control,
        section properties) at a time; each is dropped once the caller moves on, so
        memory holds one block of a long document, not all of it."""
        tags, body = _BODY_BLOCKS, W + "body"
        if self.strict:
            tags, body = tuple(_strict_name(t) for t in tags), _strict_name(body)
        tags += (MC + "AlternateContent",)  # the same namespace in Strict files
        main = self._open(self.main_part)
        if main is None:
            raise corrupt(f"the main document part {self.main_part!r} is missing")
        try:
            with main as stream:
                # The same safe options as _parse's parser.
                events = etree.iterparse(
                    stream,
                    events=("end",),
                    tag=tags,
                    resolve_entities=False,
                    no_network=True,
                    load_dtd=False,
                    remove_comments=True,
                    remove_pis=True,
                )
                for _, element in events:
                    parent = element.getparent()
                    if parent is None or parent.tag != body:
                        continue  # nested: read with the block that holds it
                    yield self._renamed(element)
                    element.clear()
                    while element.getprevious() is not None:
                        del parent[0]
        except etree.XMLSyntaxError as exc:
            raise _syntax_error(exc, self.main_part) from None

    def _relationships(self, name: str, *, source: str) -> dict[str, _Relationship]:
        stream = self._open(name)
        if stream is None:
            if not source:
                raise corrupt(f"the package has no {name}") from None
            return {}  # a document without relationships: no headers, notes or lists
        with stream:
            root = _parse(stream, name)
        found = {}
        for rel in root.iter(_PACKAGE_RELS + "Relationship"):
            rel_type, target, rel_id = rel.get("Type", ""), rel.get("Target", ""), rel.get("Id")
            if rel.get("TargetMode") == "External" or not rel_id:
                continue
            for base in (_TRANSITIONAL_RELS, _STRICT_RELS):
                if rel_type.startswith(base + "/"):
                    found[rel_id] = _Relationship(
                        rel_type[len(base) + 1 :],
                        _resolve(source, target),
                        strict=base == _STRICT_RELS,
                    )
        return found

    def _check_content_type(self, part: str) -> None:
        stream = self._open("[Content_Types].xml")
        if stream is None:
            raise corrupt("the package has no [Content_Types].xml")
        with stream:
            root = _parse(stream, "[Content_Types].xml")
        for override in root.iter(_CONTENT_TYPES + "Override"):
            if override.get("PartName", "").lstrip("/") == part:
                content_type = override.get("ContentType", "")
                if content_type not in _WORD_MAIN_TYPES:
                    raise UnreadableDocumentError(
                        f"the zip is not a Word document (its main part is {content_type[:100]})",
                        kind="format_mismatch",
                    )
                return
        raise corrupt(f"[Content_Types].xml gives no type for the main part {part!r}")

    def _renamed(self, element: etree._Element) -> etree._Element:
        if self.strict:
            _to_transitional(element)
        return element


def _parse(stream: IO[bytes], name: str) -> etree._Element:
    try:
        # No entities, no DTD, no network; huge_tree stays off, keeping libxml2's depth limit.
        parser = etree.XMLParser(
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            remove_comments=True,
            remove_pis=True,
        )
        return etree.parse(stream, parser).getroot()
    except etree.XMLSyntaxError as exc:
        raise _syntax_error(exc, name) from None


def _syntax_error(exc: etree.XMLSyntaxError, part: str) -> UnreadableDocumentError:
    if "Excessive depth" in str(exc):
        return too_complex(f"{part} nests its elements more than 256 levels deep")
    return corrupt(f"{part} is not well-formed XML ({exc})")


def _rels_of(part: str) -> str:
    folder, name = posixpath.split(part)
    return posixpath.join(folder, "_rels", name + ".rels")


def _resolve(source: str, target: str) -> str:
    if target.startswith("/"):
        return posixpath.normpath(target).lstrip("/")
    return posixpath.normpath(posixpath.join(posixpath.dirname(source), target))


def _strict_name(name: str) -> str:
    namespace, _, local = name[1:].partition("}")
    strict = next(s for s, t in _STRICT_TO_TRANSITIONAL.items() if t == namespace)
    return f"{{{strict}}}{local}"


# A Strict file names a few hundred elements and attributes; a hostile one may name millions,
# which must not stay in a worker process for good.
@lru_cache(maxsize=4096)
def _transitional_name(name: str) -> str:
    if name.startswith("{"):
        namespace, _, local = name[1:].partition("}")
        if namespace in _STRICT_TO_TRANSITIONAL:
            return f"{{{_STRICT_TO_TRANSITIONAL[namespace]}}}{local}"
    return name


def _to_transitional(root: etree._Element) -> None:
    for element in root.iter():
        if not isinstance(element.tag, str):
            continue
        element.tag = _transitional_name(element.tag)
        for name in [n for n in element.attrib if _transitional_name(str(n)) != n]:
            value = element.attrib.pop(name)
            element.set(_transitional_name(str(name)), value)
