"""What a reviewer sees of a document's pages: each PDF or image page as an image, upright
the first time it is asked for and kept (documents never change; a page that could not be
drawn is kept as its failure, answered at once from then on), and where each value's quote
stands on its page(s), from the geometry extraction kept with each page."""

from __future__ import annotations

import tempfile
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from docpipe.errors import ConflictError, NotFoundError, UnreadableDocumentError
from docpipe.extraction.formats import IMAGE_FORMATS, DocumentFormat
from docpipe.extraction.geometry import PageGeometry
from docpipe.extraction.images import render_image_page
from docpipe.extraction.page_images import RenderedPage, render_page
from docpipe.state.db import Database
from docpipe.state.documents import copy_original, get_document
from docpipe.state.runs import Progress

__all__ = ["evidence_with_boxes", "render_page_image", "stored_page_image", "with_quote_boxes"]

# What has pages to show as images.
_PAGED_FORMATS = {DocumentFormat.PDF, *IMAGE_FORMATS}


def stored_page_image(
    db: Database, tenant_id: str, document_id: str, page: int
) -> RenderedPage | None:
    """Page ``page`` (1-based) of the tenant's PDF or image as a PNG once rendered; None
    while it is not. NotFoundError for another tenant's or an unknown document, a text or
    DOCX document (no pages to show) or a page past the end; ConflictError until the pages
    are read; the UnreadableDocumentError it failed with, for a page that could not be
    drawn."""
    with db.session() as s:
        stored = get_document(s, tenant_id, document_id)
    if stored.format not in _PAGED_FORMATS:
        raise NotFoundError(
            f"document {document_id!r} is a {stored.format} document: only a PDF's or an "
            "image's pages have images (its text is what the runs read)"
        )
    if not stored.extracted or stored.pages is None:
        raise ConflictError(
            f"the pages of document {document_id!r} are not read yet: a run's extract_text "
            "step reads them (and finds which way up each is); ask again after it"
        )
    if not 1 <= page <= stored.pages:
        raise NotFoundError(
            f"document {document_id!r} has {stored.pages} page(s): there is no page {page}"
        )
    cached = db.one("page_image", tenant_id=tenant_id, document_id=document_id, page=page - 1)
    if cached is None:
        return None
    if cached["error"] is not None:
        raise UnreadableDocumentError(cached["error"], kind=cached["error_kind"])
    return RenderedPage(bytes(cached["png"]), cached["width"], cached["height"])


def render_page_image(
    db: Database,
    tenant_id: str,
    document_id: str,
    page: int,
    *,
    max_pixels: int,
    decode_pixels: int,
    timeout_s: float,
    max_bytes: int,
) -> RenderedPage:
    """Render page ``page`` (1-based; :func:`stored_page_image` checked it) upright, within
    ``max_pixels`` (an image decoded within ``decode_pixels``, as extraction decodes it; a
    PDF drawn within ``timeout_s`` and ``max_bytes`` of memory), and keep it; a page that
    cannot be drawn is kept as its failure (UnreadableDocumentError, raised)."""
    with db.session() as s:
        fmt = get_document(s, tenant_id, document_id).format
    key = {"tenant_id": tenant_id, "document_id": document_id, "page": page - 1}
    found = db.one("page_rotation", **key)
    rotation = 0 if found is None else int(found["rotation"])
    # The file in a file of its own, as the worker reads it: the API's memory does not grow
    # with it.
    with tempfile.TemporaryFile(prefix="docpipe-page-") as file:
        copy_original(db, tenant_id, document_id, file)
        file.seek(0)
        try:
            if fmt == DocumentFormat.PDF:
                rendered = render_page(
                    file,
                    page - 1,
                    rotation=rotation,
                    max_pixels=max_pixels,
                    timeout_s=timeout_s,
                    max_bytes=max_bytes,
                )
            else:
                png, width, height = render_image_page(
                    file,
                    fmt,
                    page - 1,
                    rotation=rotation,
                    decode_pixels=decode_pixels,
                    max_pixels=max_pixels,
                )
                rendered = RenderedPage(png, width, height)
        except UnreadableDocumentError as exc:
            db.execute("store_page_image_failure", kind=exc.kind, error=exc.args[0], **key)
            raise
    db.execute(
        "store_page_image", png=rendered.png, width=rendered.width, height=rendered.height, **key
    )
    return rendered


def with_quote_boxes(db: Database, tenant_id: str, runs: Sequence[Progress]) -> list[Progress]:
    """``runs`` with the boxes of each value's quote (``values[i]["boxes"]``): one per line
    the quote covers, ``{"page", "left", "top", "right", "bottom", "page_width",
    "page_height"}`` in points on the upright page, origin at its top left; none for a
    quote not found, or in a document without page geometry (text, DOCX). Two queries for
    all of them."""
    values = [run.values or [] for run in runs]  # (each read checks every record)
    found = _quote_boxes(
        db, tenant_id, [(r.document_id, v) for r, v in zip(runs, values, strict=True)]
    )
    return [
        replace(run, quote_boxes=tuple(boxes)) if values[i] else run
        for i, (run, boxes) in enumerate(zip(runs, found, strict=True))
    ]


def evidence_with_boxes(
    db: Database, tenant_id: str, document_id: str, records: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Evidence ``records`` of one document, each with its quote's ``boxes`` (as
    :func:`with_quote_boxes` gives them)."""
    [boxes] = _quote_boxes(db, tenant_id, [(document_id, records)])
    return [{**record, "boxes": b} for record, b in zip(records, boxes, strict=True)]


def _quote_boxes(
    db: Database, tenant_id: str, wanted: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]
) -> list[list[list[dict[str, Any]]]]:
    """For each (document, records): each record's boxes, read in two queries for all."""
    documents = sorted({document_id for document_id, records in wanted if records})
    if not documents:
        return [[[] for _ in records] for _, records in wanted]
    starts = {
        row["id"]: list(row["page_starts"])
        for row in db.all("page_starts", tenant_id=tenant_id, ids=documents)
    }
    needed = sorted(
        {
            (document_id, page)
            for document_id, records in wanted
            for record in records
            for page in _pages_of(record, starts.get(document_id, [0]))
        }
    )
    rows = (
        db.all(
            "page_geometries",
            tenant_id=tenant_id,
            document_ids=[d for d, _ in needed],
            pages=[p for _, p in needed],
        )
        if needed
        else []
    )
    geometries = {
        (row["document_id"], row["page"]): PageGeometry.from_json(row["geometry"]) for row in rows
    }
    return [
        [
            _boxes(record, starts.get(document_id, [0]), geometries, document_id)
            for record in records
        ]
        for document_id, records in wanted
    ]


def _pages_of(value: Mapping[str, Any], page_starts: list[int]) -> range:
    """The 0-based pages the value's quote spans (none when it was not found)."""
    start, end = value.get("start"), value.get("end")
    if not isinstance(start, int) or not isinstance(end, int) or end <= start:
        return range(0)
    first = max(0, bisect_right(page_starts, start) - 1)
    last = max(0, bisect_right(page_starts, end - 1) - 1)
    return range(first, last + 1)


def _boxes(
    value: Mapping[str, Any],
    page_starts: list[int],
    geometries: Mapping[tuple[str, int], PageGeometry],
    document_id: str,
) -> list[dict[str, Any]]:
    boxes = []
    for page in _pages_of(value, page_starts):
        geometry = geometries.get((document_id, page))
        if geometry is None:
            continue
        offset = page_starts[page]
        start = max(int(value["start"]), offset) - offset
        end = int(value["end"]) - offset
        for left, top, right, bottom in geometry.boxes(start, end):
            boxes.append(
                {
                    "page": page + 1,
                    "left": left,
                    "top": top,
                    "right": right,
                    "bottom": bottom,
                    "page_width": geometry.width,
                    "page_height": geometry.height,
                }
            )
    return boxes
