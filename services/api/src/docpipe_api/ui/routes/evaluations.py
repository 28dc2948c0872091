"""The evaluations' pages: the tenant's sets and evaluations, an evaluation's report (its
scores, accuracy by field as a chart, the review rules measured, its documents), one
document's diff of expected against got beside its page and evidence, and two evaluations
compared (accuracy by field side by side, the paired difference, the flips, the cost).
Each reads through the actions the API's /evaluation-sets and /evaluations routes call."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from docpipe_api import actions
from docpipe_api.deps import ResourcesDep
from docpipe_api.schemas import UUID_PATTERN
from docpipe_api.ui.deps import UiCallerDep
from docpipe_api.ui.pages import go_to, render
from docpipe_api.ui.review_view import IMAGE_FORMATS

__all__ = ["router"]

router = APIRouter()

EvaluationId = Annotated[str, Path(pattern=f"^{UUID_PATTERN}$")]
DOCUMENTS_PER_PAGE = 100
# The most evaluations the index lists (and the compare form offers).
EVALUATIONS_LISTED = 50
FLIPS_SHOWN = 200  # of each direction, on the compare page


@router.get("/evaluations")
def evaluations_page(request: Request, resources: ResourcesDep, caller: UiCallerDep) -> Response:
    """The tenant's evaluation sets and its evaluations (newest first), and a form that
    compares two reported ones."""
    found = actions.evaluations_list(resources=resources, caller=caller, limit=EVALUATIONS_LISTED)
    return render(
        request,
        "evaluations.html",
        {
            "sets": actions.evaluation_sets(resources=resources, caller=caller).sets,
            "evaluations": found.evaluations,
            "reported": [e for e in found.evaluations if e.status == "reported"],
        },
    )


@router.get("/evaluations/compare")
def compare_page(
    request: Request,
    resources: ResourcesDep,
    caller: UiCallerDep,
    baseline: Annotated[str, Query(pattern=f"^{UUID_PATTERN}$")],
    candidate: Annotated[str, Query(pattern=f"^{UUID_PATTERN}$")],
    max_drop: Annotated[float, Query(ge=0, le=1)] = 0.02,
) -> Response:
    """Candidate against baseline, as GET /evaluations/compare answers it (with the gate at
    ``max_drop``)."""
    compared = actions.compare_evaluations(
        resources=resources,
        caller=caller,
        baseline=baseline,
        candidate=candidate,
        max_drop=max_drop,
    )
    pair = [
        actions.evaluation_status(resources=resources, caller=caller, evaluation_id=e)
        for e in (baseline, candidate)
    ]
    return render(
        request,
        "evaluation_compare.html",
        {
            "compared": compared,
            "baseline": pair[0],
            "candidate": pair[1],
            "FLIPS_SHOWN": FLIPS_SHOWN,
        },
    )


@router.get("/evaluations/{evaluation_id}")
def evaluation_page(
    request: Request,
    evaluation_id: EvaluationId,
    resources: ResourcesDep,
    caller: UiCallerDep,
    after: Annotated[str, Query(max_length=300)] = "",
) -> Response:
    """Its batch's progress while it runs; then its report and its documents, a page at
    a time."""
    evaluation = actions.evaluation_status(
        resources=resources, caller=caller, evaluation_id=evaluation_id
    )
    documents: list[Any] = []
    next_after = None
    if evaluation.status == "reported":
        page = actions.evaluation_documents(
            resources=resources,
            caller=caller,
            evaluation_id=evaluation_id,
            after=after,
            limit=DOCUMENTS_PER_PAGE,
        )
        documents, next_after = page.documents, page.next_after
    return render(
        request,
        "evaluation.html",
        {
            "evaluation": evaluation,
            "report": evaluation.report,
            "documents": documents,
            "next_after": next_after,
        },
    )


@router.post("/evaluations/{evaluation_id}/cancel")
def cancel_evaluation(
    request: Request, evaluation_id: EvaluationId, resources: ResourcesDep, caller: UiCallerDep
) -> Response:
    actions.cancel_evaluation(resources=resources, caller=caller, evaluation_id=evaluation_id)
    return go_to(request, f"/evaluations/{evaluation_id}")


@router.get("/evaluations/{evaluation_id}/documents/{document_id}")
def evaluation_document_page(
    request: Request,
    evaluation_id: EvaluationId,
    document_id: Annotated[str, Path(max_length=300)],
    resources: ResourcesDep,
    caller: UiCallerDep,
    page: Annotated[int | None, Query(ge=1, le=100_000)] = None,
) -> Response:
    """What the document's run got wrong (expected, got, the quote it gave and whether the
    document holds it), beside the page image of a PDF or an image: ``page``, or the
    page the first wrong value's evidence names."""
    diff = actions.evaluation_document(
        resources=resources, caller=caller, evaluation_id=evaluation_id, document_id=document_id
    )
    document = actions.read_document(resources=resources, caller=caller, document_id=document_id)
    pages = document.pages or 0
    shown = page or _first_evidence_page(diff.wrong) or 1
    return render(
        request,
        "evaluation_document.html",
        {
            "evaluation_id": evaluation_id,
            "diff": diff,
            "document": document,
            "as_image": document.format in IMAGE_FORMATS and 1 <= shown <= pages,
            "page": shown,
            "pages": pages,
        },
    )


def _first_evidence_page(wrong: list[dict[str, Any]]) -> int | None:
    for cell in wrong:
        for record in cell.get("evidence") or ():
            if isinstance(record.get("page"), int):
                return int(record["page"])
    return None
