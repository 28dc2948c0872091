"""The ``poor_extraction`` review rule: a run whose document could mostly not be read goes
to a person instead of ending ``done`` with what little was read.

It holds when more than a share of the document's pages (``DOCPIPE_POOR_EXTRACTION_SHARE``)
were read poorly, by the warnings ``extract_text`` recorded for them (OCR confidence below
``DOCPIPE_OCR_LOW_CONFIDENCE``, no text, OCR out of time), or when a step that records
evidence found no value at all. Its reason names the pages and what was wrong with each.

A pure function of the step outputs so far and the share: it can be asked after any step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["POOR_PAGE_KINDS", "poor_extraction"]

# The page warnings (docpipe.extraction.pages.WARNING_KINDS) that say a page was read poorly,
# as the reason words them.
POOR_PAGE_KINDS = {
    "low_ocr_confidence": "low OCR confidence",
    "no_text": "no text",
    "ocr_timeout": "OCR out of time",
}
# The extract_text step's name (docpipe.pipelines.text_extraction, which imports the model
# this rule belongs to).
_EXTRACTION = "extract_text"
_NAMED_PAGES = 10


def poor_extraction(outputs: Mapping[str, Any], *, max_share: float) -> str | None:
    """Why the run goes to review by this rule, naming the pages; None when it does not."""
    poor = _poor_pages(outputs.get(_EXTRACTION))
    pages = _page_count(outputs.get(_EXTRACTION))
    empty = [step for step, output in outputs.items() if _found_nothing(output)]
    reasons = []
    if pages and len(poor) > max_share * pages:
        reasons.append(f"{len(poor)} of {pages} pages could not be read well: {_named(poor)}")
    if empty:
        found = f" (pages read poorly: {_named(poor)})" if poor and not reasons else ""
        reasons.append(f"{', '.join(empty)} found no value at all{found}")
    return "; ".join(reasons) or None


def _poor_pages(extraction: Any) -> dict[int, list[str]]:
    """Each poorly read page (1-based) with what was wrong with it, in page order."""
    poor: dict[int, list[str]] = {}
    warnings = extraction.get("warnings") if isinstance(extraction, Mapping) else None
    for warning in warnings if isinstance(warnings, list) else []:
        # Runs from before warnings had a kind recorded sentences: they count for nothing.
        if not isinstance(warning, Mapping) or warning.get("kind") not in POOR_PAGE_KINDS:
            continue
        label = POOR_PAGE_KINDS[warning["kind"]]
        if warning["kind"] == "low_ocr_confidence" and warning.get("value") is not None:
            label += f" {warning['value']:g}"
        poor.setdefault(int(warning["page"]), []).append(label)
    return dict(sorted(poor.items()))


def _page_count(extraction: Any) -> int:
    pages = extraction.get("pages") if isinstance(extraction, Mapping) else None
    return pages if isinstance(pages, int) else 0


def _found_nothing(output: Any) -> bool:
    """A step that records evidence (an ``evidence`` list in its output) recorded none."""
    return isinstance(output, Mapping) and output.get("evidence") == []


def _named(poor: dict[int, list[str]]) -> str:
    named = [f"page {page} ({' and '.join(labels)})" for page, labels in poor.items()]
    more = len(named) - _NAMED_PAGES
    return ", ".join(named[:_NAMED_PAGES]) + (f" and {more} more" if more > 0 else "")
