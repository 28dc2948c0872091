"""Word files written as OOXML, for the features LibreOffice cannot save (Strict Open XML,
OMML built by hand, shapes stored twice) and for hostile files (docpipe_dev.hostile).
``tests/fixtures/word/`` holds the files LibreOffice makes; these are the rest, built when
a test or a benchmark needs them (a few KB each)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

NAMESPACES = {
    "w": "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships",
    "m": "http://schemas.openxmlformats.org/officeDocument/2006/math",
    "mc": "http://schemas.openxmlformats.org/markup-compatibility/2006",
    "wp": "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing",
    "a": "http://schemas.openxmlformats.org/drawingml/2006/main",
    "wps": "http://schemas.microsoft.com/office/word/2010/wordprocessingShape",
    "v": "urn:schemas-microsoft-com:vml",
}
# What Word writes instead when a file is saved as "Strict Open XML Document".
STRICT = {
    NAMESPACES["w"]: "http://purl.oclc.org/ooxml/wordprocessingml/main",
    NAMESPACES["r"]: "http://purl.oclc.org/ooxml/officeDocument/relationships",
    NAMESPACES["m"]: "http://purl.oclc.org/ooxml/officeDocument/math",
    NAMESPACES["wp"]: "http://purl.oclc.org/ooxml/drawingml/wordprocessingDrawing",
    NAMESPACES["a"]: "http://purl.oclc.org/ooxml/drawingml/main",
}
_XMLNS = " ".join(f'xmlns:{p}="{u}"' for p, u in NAMESPACES.items())
_TYPES = "application/vnd.openxmlformats-officedocument.wordprocessingml"
_RELS = NAMESPACES["r"]


@dataclass(frozen=True)
class Part:
    """A part besides the main document: its relationship type (last segment), content
    type suffix and root element (with the document's namespaces declared on it)."""

    rel_type: str
    content_type: str
    root: str
    body: str


def header(body: str) -> Part:
    return Part("header", "header+xml", "w:hdr", body)


def footer(body: str) -> Part:
    return Part("footer", "footer+xml", "w:ftr", body)


def footnotes(body: str) -> Part:
    return Part("footnotes", "footnotes+xml", "w:footnotes", body)


def endnotes(body: str) -> Part:
    return Part("endnotes", "endnotes+xml", "w:endnotes", body)


def numbering(body: str) -> Part:
    return Part("numbering", "numbering+xml", "w:numbering", body)


def p(text: str, properties: str = "") -> str:
    """A paragraph of one run (``text`` is XML-safe already)."""
    run = f'<w:r><w:t xml:space="preserve">{text}</w:t></w:r>' if text else ""
    return f"<w:p>{f'<w:pPr>{properties}</w:pPr>' if properties else ''}{run}</w:p>"


def table(*rows: list[str]) -> str:
    """A table whose cells hold these blocks' XML."""
    cells = ("".join(f"<w:tc>{cell or '<w:p/>'}</w:tc>" for cell in row) for row in rows)
    return "<w:tbl>" + "".join(f"<w:tr>{r}</w:tr>" for r in cells) + "</w:tbl>"


def text_box(text: str, *, fallback: str | None = None) -> str:
    """A run holding a shape with ``text``, stored as Word does: DrawingML in mc:Choice,
    the same text again in VML in mc:Fallback (``fallback``, when it differs)."""
    box = f"<w:txbxContent>{p(text)}</w:txbxContent>"
    fallback_box = f"<w:txbxContent>{p(fallback if fallback is not None else text)}</w:txbxContent>"
    return (
        "<w:r><mc:AlternateContent>"
        '<mc:Choice Requires="wps"><w:drawing><wp:anchor><a:graphic><a:graphicData>'
        f"<wps:wsp><wps:txbx>{box}</wps:txbx></wps:wsp>"
        "</a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice>"
        f"<mc:Fallback><w:pict><v:shape><v:textbox>{fallback_box}</v:textbox></v:shape>"
        "</w:pict></mc:Fallback></mc:AlternateContent></w:r>"
    )


def word_file(
    body: str,
    parts: Mapping[str, Part] | None = None,
    *,
    section: str = "",
    strict: bool = False,
) -> bytes:
    """A .docx whose body is ``body`` (XML), with ``parts`` (name under word/ -> Part)
    related from the document as rId1, rId2, ... in that order; ``section`` goes into the
    body's last w:sectPr (header references, say). ``strict`` writes it as Word's Strict
    Open XML: other namespaces, same local names."""
    parts = dict(parts or {})
    rels = "".join(
        f'<Relationship Id="rId{i}" Type="{_RELS}/{part.rel_type}" Target="{name}"/>'
        for i, (name, part) in enumerate(parts.items(), start=1)
    )
    overrides = "".join(
        f'<Override PartName="/word/{name}" ContentType="{_TYPES}.{part.content_type}"/>'
        for name, part in parts.items()
    )
    conformance = ' w:conformance="strict"' if strict else ""
    members = {
        "[Content_Types].xml": (
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/word/document.xml" ContentType="{_TYPES}.document.main+xml"/>'
            f"{overrides}</Types>"
        ),
        "_rels/.rels": _relationships(
            f'<Relationship Id="rId1" Type="{_RELS}/officeDocument" Target="word/document.xml"/>'
        ),
        "word/_rels/document.xml.rels": _relationships(rels),
        "word/document.xml": (
            f"<w:document {_XMLNS}{conformance}><w:body>{body}<w:sectPr>{section}</w:sectPr>"
            "</w:body></w:document>"
        ),
    }
    for name, part in parts.items():
        members[f"word/{name}"] = f"<{part.root} {_XMLNS}>{part.body}</{part.root}>"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, xml in members.items():
            if strict:
                for transitional, strict_uri in STRICT.items():
                    xml = xml.replace(transitional, strict_uri)
            archive.writestr(name, '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' + xml)
    return buffer.getvalue()


def member(data: bytes, name: str) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.read(name)


def with_member(data: bytes, name: str, content: bytes) -> bytes:
    """``data`` with the zip member ``name`` replaced by ``content``."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as source,
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive,
    ):
        for info in source.infolist():
            archive.writestr(info.filename, content if info.filename == name else source.read(info))
    return buffer.getvalue()


def _relationships(body: str) -> str:
    return (
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f"{body}</Relationships>"
    )
