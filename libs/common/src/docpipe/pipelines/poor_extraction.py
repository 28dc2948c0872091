"""The ``poor_extraction`` review rule: a run whose document could mostly not be read goes
to a person instead of ending ``done`` with what little was read.

After ``extract_text`` it holds when more than a share of the document's pages
(``DOCPIPE_POOR_EXTRACTION_SHARE``) were read poorly, by the warnings recorded for them (OCR
confidence below ``DOCPIPE_OCR_LOW_CONFIDENCE``, no text, OCR out of time): the run pauses
before any model is paid for, and the reason names the pages and what was wrong with each.
After a step that records evidence, it holds when that step found no value at all.

A pure function of a step's output and the share, like every review rule
(docpipe.pipelines.review): it is asked after each step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docpipe.settings import Settings

__all__ = ["DEFAULT_POOR_EXTRACTION_SHARE", "POOR_PAGE_KINDS", "poor_extraction"]

DEFAULT_POOR_EXTRACTION_SHARE: float = Settings.model_fields["poor_extraction_share"].default
# The page warnings (docpipe.extraction.pages.WARNING_KINDS) that say a page was read poorly,
# as the reason words them.
POOR_PAGE_KINDS = {
    "low_ocr_confidence": "low OCR confidence",
    "no_text": "no text",
    "ocr_timeout": "OCR out of time",
}
_NAMED_PAGES = 10


def poor_extraction(output: Mapping[str, Any], *, max_share: float) -> str | None:
    """Why the run goes to review after the step that gave ``output`` (an extract_text
    output naming its poorly read pages, or a step that found no value); None when not."""
    if isinstance(output.get("warnings"), list) and isinstance(output.get("pages"), int):
        poor, pages = _poor_pages(output["warnings"]), output["pages"]
        if pages and len(poor) > max_share * pages:
            return f"{len(poor)} of {pages} pages could not be read well: {_named(poor)}"
    if output.get("evidence") == []:  # a step that records evidence recorded none
        return "the step found no value at all"
    return None


def _poor_pages(warnings: list[Any]) -> dict[int, list[str]]:
    """Each poorly read page (1-based) with what was wrong with it, in page order."""
    poor: dict[int, list[str]] = {}
    for warning in warnings:
        # Runs from before warnings had a kind recorded sentences: they count for nothing.
        if not isinstance(warning, Mapping) or warning.get("kind") not in POOR_PAGE_KINDS:
            continue
        label = POOR_PAGE_KINDS[warning["kind"]]
        if warning["kind"] == "low_ocr_confidence" and warning.get("value") is not None:
            label += f" {warning['value']:g}"
        poor.setdefault(int(warning["page"]), []).append(label)
    return dict(sorted(poor.items()))


def _named(poor: dict[int, list[str]]) -> str:
    named = [f"page {page} ({' and '.join(labels)})" for page, labels in poor.items()]
    more = len(named) - _NAMED_PAGES
    return ", ".join(named[:_NAMED_PAGES]) + (f" and {more} more" if more > 0 else "")
