"""What the review page shows, made from a review (docpipe.state.reviews.ReviewDetail):
the document a page at a time, the generated form with each value's evidence, the reasons
and the history. Pure: no database, no request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from docpipe.pipelines.review import ALWAYS
from docpipe.state.reviews import ReviewDetail
from docpipe_api.ui.forms import Field, escape_token, form_for

__all__ = ["IMAGE_FORMATS", "ReviewView", "evidence_by_pointer", "review_view"]

# A rule that asks for a person every time: a routine review, not a reason to show.
ROUTINE = ALWAYS
# Formats shown as page images (GET /documents/{id}/pages/{n}); the others as their text.
IMAGE_FORMATS = ("pdf", "png", "jpeg", "tiff")


@dataclass(frozen=True)
class Page:
    number: int
    start: int  # offset of its first character in the document's text
    text: str


@dataclass(frozen=True)
class ReviewView:
    detail: ReviewDetail
    form: Field
    unplaced_errors: list[str]  # schema errors no field of the form shows
    evidence: list[dict[str, Any]]  # what the page's script highlights, by index
    pages: list[Page]
    page: int  # the page shown first
    page_error: str | None  # the page asked for does not exist
    as_image: bool
    retry_steps: list[str]  # the step in review and the ones before it
    why: list[str]  # why it waits, when there is a why ("always reviewed" is none)
    problems: list[str]  # what is wrong with the output beyond the reasons (schema errors)


def evidence_by_pointer(
    output: Mapping[str, Any] | None, records: Sequence[Mapping[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Each evidence record (with its ``index``) under the JSON Pointer of the value it is
    for: its ``path``, or for records written before paths were, ``/fields/<field>`` when
    the output has that field, else ``/<field>``."""
    found: dict[str, list[dict[str, Any]]] = {}
    fields = output.get("fields") if isinstance(output, Mapping) else None
    for index, record in enumerate(records):
        path = record.get("path")
        if not isinstance(path, str):
            name = escape_token(str(record.get("field", "")))
            in_fields = isinstance(fields, Mapping) and record.get("field") in fields
            path = f"/fields/{name}" if in_fields else f"/{name}"
        found.setdefault(path, []).append({**record, "index": index})
    return found


def _pages(text: str, page_starts: Sequence[int]) -> list[Page]:
    starts = list(page_starts) or [0]
    ends = [*starts[1:], len(text)]
    return [Page(n, s, text[s:e]) for n, (s, e) in enumerate(zip(starts, ends, strict=True), 1)]


def _script_evidence(record: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One record as the page's script needs it (boxes: PDF points, origin top-left)."""
    keep = (
        "field",
        "path",
        "quote",
        "page",
        "start",
        "end",
        "supported",
        "support",
        "boxes",
        "page_width",
        "page_height",
    )
    return {"index": index, **{k: record[k] for k in keep if k in record}}


def review_view(
    detail: ReviewDetail,
    *,
    page: int | None = None,
    values: Mapping[str, Any] | None = None,
    errors: Sequence[Mapping[str, Any]] = (),
    typed: Mapping[str, str] | None = None,
    step_names: Sequence[str] = (),
) -> ReviewView:
    """The page of ``detail``: the form filled with ``values`` (the step's output unless a
    reviewer's submitted values are shown again) and ``errors`` placed by pointer; the
    document at ``page`` (default: the page of the first located quote)."""
    output = detail.output or {}
    hidden = ("evidence",) if detail.evidence else ()
    by_pointer = evidence_by_pointer(output, detail.evidence)
    form, unplaced = form_for(
        detail.output_schema,
        values if values is not None else output,
        hidden=hidden,
        evidence=by_pointer,
        errors=errors,
        typed=typed,
    )
    pages = _pages(detail.document_text, detail.page_starts)
    located = next((int(r["page"]) for r in detail.evidence if r.get("page")), 1)
    shown, page_error = located if page is None else page, None
    if not 1 <= shown <= len(pages):
        page_error = (
            f"Page {shown} does not exist: the document has {len(pages)} "
            f"page{'s' if len(pages) != 1 else ''}. Showing page 1."
        )
        shown = 1
    summary = detail.summary
    reasons = [r for r in summary.reasons if r.get("kind") != ROUTINE]
    why = [str(r.get("message") or r.get("kind")) for r in reasons]
    if not summary.reasons and summary.reason:
        why = [summary.error or summary.reason]
    # The run's error restates its reasons; what is left is about the output itself.
    problems = [e for e in detail.errors if e != summary.error and e not in why]
    step = summary.step
    names = list(step_names)
    retry_steps = names[: names.index(step) + 1] if step is not None and step in names else []
    return ReviewView(
        detail=detail,
        form=form,
        unplaced_errors=unplaced,
        evidence=[_script_evidence(r, i) for i, r in enumerate(detail.evidence)],
        pages=pages,
        page=shown,
        page_error=page_error,
        as_image=detail.document_format in IMAGE_FORMATS,
        retry_steps=retry_steps or ([step] if step else []),
        why=why,
        problems=problems,
    )
