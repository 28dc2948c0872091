"""What a reviewer sees of a document's pages: each PDF page as an image, rendered upright
the first time it is asked for and kept (documents never change), and where each value's
quote stands on its page(s), from the geometry extraction kept with each page."""

from __future__ import annotations

import tempfile
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from docpipe.errors import ConflictError, NotFoundError
from docpipe.extraction.geometry import PageGeometry
from docpipe.extraction.page_images import RenderedPage, render_page
from docpipe.state.db import Database
from docpipe.state.documents import copy_original, get_document
from docpipe.state.runs import Progress

__all__ = ["evidence_with_boxes", "page_image", "with_quote_boxes"]


def page_image(
    db: Database, tenant_id: str, document_id: str, page: int, *, max_pixels: int
) -> RenderedPage:
    """Page ``page`` (1-based) of the tenant's PDF as a PNG of at most ``max_pixels``:
    NotFoundError for another tenant's or an unknown document, a text or DOCX document
    (no pages to show) or a page past the end; ConflictError until the pages are read."""
    with db.session() as s:
        stored = get_document(s, tenant_id, document_id)
    if stored.format != "pdf":
        raise NotFoundError(
            f"document {document_id!r} is a {stored.format} document: only a PDF's pages have "
            "images (its text is what the runs read)"
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
    key = {"tenant_id": tenant_id, "document_id": document_id, "page": page - 1}
    cached = db.one("page_image", **key)
    if cached is not None:
        return RenderedPage(bytes(cached["png"]), cached["width"], cached["height"])
    found = db.one("page_rotation", **key)
    rotation = 0 if found is None else int(found["rotation"])
    # The file in a file of its own, as the worker reads it: the API's memory does not grow
    # with it.
    with tempfile.TemporaryFile(prefix="docpipe-page-") as file:
        copy_original(db, tenant_id, document_id, file)
        file.seek(0)
        rendered = render_page(file, page - 1, rotation=rotation, max_pixels=max_pixels)
    db.execute("store_page_image", png=rendered.png, width=rendered.width,
               height=rendered.height, **key)  # fmt: skip
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
    return [replace(run, quote_boxes=tuple(boxes)) if values[i] else run
            for i, (run, boxes) in enumerate(zip(runs, found, strict=True))]  # fmt: skip


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
    starts = {row["id"]: list(row["page_starts"])
              for row in db.all("page_starts", tenant_id=tenant_id, ids=documents)}  # fmt: skip
    needed = sorted({(document_id, page) for document_id, records in wanted
                     for record in records
                     for page in _pages_of(record, starts.get(document_id, [0]))})  # fmt: skip
    rows = db.all("page_geometries", tenant_id=tenant_id, document_ids=[d for d, _ in needed],
                  pages=[p for _, p in needed]) if needed else []  # fmt: skip
    geometries = {(row["document_id"], row["page"]): PageGeometry.from_json(row["geometry"])
                  for row in rows}  # fmt: skip
    return [[_boxes(record, starts.get(document_id, [0]), geometries, document_id)
             for record in records] for document_id, records in wanted]  # fmt: skip


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
            boxes.append({"page": page + 1, "left": left, "top": top, "right": right,
                          "bottom": bottom, "page_width": geometry.width,
                          "page_height": geometry.height})  # fmt: skip
    return boxes
