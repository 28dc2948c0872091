"""Evaluations: a pipeline version over an evaluation set, run as a batch and scored; its
report, its documents, and two evaluations compared. Thin: each route calls one action."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from anyio.to_thread import run_sync
from fastapi import APIRouter, Path, Query, Request

from docpipe_api import actions
from docpipe_api.bodies import parsed_json, read_capped, require_json
from docpipe_api.deps import CallerDep, ResourcesDep
from docpipe_api.errors import error_responses
from docpipe_api.evaluation_schemas import (
    CompareOut,
    EvaluationDocumentOut,
    EvaluationDocumentsOut,
    EvaluationIn,
    EvaluationOut,
    EvaluationsOut,
)
from docpipe_api.schemas import DOCUMENT_ID_ECMA, UUID_PATTERN, request_body_schema

__all__ = ["router"]

router = APIRouter(tags=["evaluations"])

_SMALL_BODY = 64 * 1024
EvaluationId = Annotated[str, Path(pattern=f"^{UUID_PATTERN}$")]


@router.post(
    "/evaluations",
    response_model=EvaluationOut,
    status_code=202,
    summary="Evaluate a pipeline version on an evaluation set (a batch, then a report)",
    description=(
        "Its runs go through the batch lane like any batch's: admitted fairly, within its "
        "budget, cancellable. They reuse the answers the tenant already has for identical "
        "requests, and measure the review rules instead of pausing for them."
    ),
    responses=error_responses(404, 409, 415, 422, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request_body_schema(EvaluationIn)}},
        }
    },
)
async def start_evaluation(
    request: Request, resources: ResourcesDep, caller: CallerDep
) -> EvaluationOut:
    require_json(request)
    wanted = parsed_json(EvaluationIn, await read_capped(request, _SMALL_BODY))
    return await run_sync(
        partial(actions.start_evaluation, resources=resources, caller=caller, wanted=wanted)
    )


@router.get(
    "/evaluations",
    response_model=EvaluationsOut,
    summary="The tenant's evaluations, newest first (reports without their documents)",
    responses=error_responses(422),
)
def list_evaluations(
    resources: ResourcesDep, caller: CallerDep, limit: Annotated[int, Query(ge=1, le=200)] = 50
) -> EvaluationsOut:
    return actions.evaluations_list(resources=resources, caller=caller, limit=limit)


@router.get(
    "/evaluations/compare",
    response_model=CompareOut,
    summary="A candidate evaluation against a baseline: per-field deltas, flips, the "
    "accuracy difference with its paired 95 % interval, the cost delta",
    responses=error_responses(404, 409, 422),
)
def compare_evaluations(
    resources: ResourcesDep,
    caller: CallerDep,
    baseline: Annotated[str, Query(pattern=f"^{UUID_PATTERN}$")],
    candidate: Annotated[str, Query(pattern=f"^{UUID_PATTERN}$")],
    max_drop: Annotated[
        float | None, Query(ge=0, le=1, description="the gate: the accuracy drop tolerated")
    ] = None,
) -> CompareOut:
    return actions.compare_evaluations(
        resources=resources,
        caller=caller,
        baseline=baseline,
        candidate=candidate,
        max_drop=max_drop,
    )


@router.get(
    "/evaluations/{evaluation_id}",
    response_model=EvaluationOut,
    summary="An evaluation's progress in one request, then its report",
    responses=error_responses(404, 422),
)
def read_evaluation(
    evaluation_id: EvaluationId, resources: ResourcesDep, caller: CallerDep
) -> EvaluationOut:
    return actions.evaluation_status(
        resources=resources, caller=caller, evaluation_id=evaluation_id
    )


@router.get(
    "/evaluations/{evaluation_id}/documents",
    response_model=EvaluationDocumentsOut,
    summary="A reported evaluation's documents: accuracy, what each got wrong, its evidence",
    responses=error_responses(404, 409, 422),
)
def read_evaluation_documents(
    evaluation_id: EvaluationId,
    resources: ResourcesDep,
    caller: CallerDep,
    after: Annotated[
        str, Query(pattern=DOCUMENT_ID_ECMA, description="next_after of the page before")
    ] = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EvaluationDocumentsOut:
    return actions.evaluation_documents(
        resources=resources, caller=caller, evaluation_id=evaluation_id, after=after, limit=limit
    )


@router.get(
    "/evaluations/{evaluation_id}/documents/{document_id}",
    response_model=EvaluationDocumentOut,
    summary="One document of a reported evaluation: the diff of expected against got",
    responses=error_responses(404, 409, 422),
)
def read_evaluation_document(
    evaluation_id: EvaluationId,
    document_id: Annotated[str, Path(pattern=DOCUMENT_ID_ECMA)],
    resources: ResourcesDep,
    caller: CallerDep,
) -> EvaluationDocumentOut:
    return actions.evaluation_document(
        resources=resources, caller=caller, evaluation_id=evaluation_id, document_id=document_id
    )


@router.post(
    "/evaluations/{evaluation_id}/cancel",
    response_model=EvaluationOut,
    summary="Stop an evaluation: no step that has not started will run (no call after it)",
    responses=error_responses(404, 409, 422, 503),
)
def cancel_evaluation(
    evaluation_id: EvaluationId, resources: ResourcesDep, caller: CallerDep
) -> EvaluationOut:
    return actions.cancel_evaluation(
        resources=resources, caller=caller, evaluation_id=evaluation_id
    )
