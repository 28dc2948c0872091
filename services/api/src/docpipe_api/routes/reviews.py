"""The review queue: runs awaiting a person, one review with what it needs, a decision."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from docpipe.pipelines.model import NAME_PATTERN
from docpipe.state import reviews
from docpipe.state.lists import PIPELINE_KEY_PATTERN
from docpipe.statuses import ReviewReason
from docpipe_api import actions
from docpipe_api.bodies import parsed_json_in_turn, read_capped, require_json
from docpipe_api.deps import CallerDep, ResourcesDep
from docpipe_api.errors import error_responses
from docpipe_api.review_schemas import DecisionIn, ReviewDetailOut, ReviewItemOut, ReviewPageOut
from docpipe_api.schemas import UUID_PATTERN, RunStatusOut, request_body_schema

__all__ = ["router"]

router = APIRouter(tags=["reviews"])


async def _decision_body(request: Request, resources: ResourcesDep) -> bytearray:
    """The decision's JSON, within DOCPIPE_MAX_DECISION_BYTES (one step's output, edited:
    far below it); parsed off the event loop, with the decision, one parse at a time."""
    require_json(request)
    limit = resources.settings.max_decision_bytes
    return await read_capped(request, limit, setting="DOCPIPE_MAX_DECISION_BYTES")


@router.get(
    "/reviews",
    response_model=ReviewPageOut,
    summary="The runs awaiting a person, oldest first",
    responses=error_responses(422, 503),
)
def list_reviews(
    resources: ResourcesDep,
    caller: CallerDep,
    pipeline: Annotated[
        str | None, Query(pattern=PIPELINE_KEY_PATTERN, description="a pipeline key: name:vN")
    ] = None,
    step: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    reason: ReviewReason | None = None,
    batch_id: Annotated[str | None, Query(pattern=f"^{UUID_PATTERN}$")] = None,
    cursor: Annotated[
        str | None,
        Query(pattern=reviews.CURSOR_PATTERN, description="next_cursor of the page before"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=reviews.MAX_PAGE)] = 50,
) -> ReviewPageOut:
    page = actions.list_reviews(
        resources=resources,
        caller=caller,
        where=reviews.QueueFilter(pipeline, step, reason, batch_id),
        cursor=cursor,
        limit=limit,
    )
    return ReviewPageOut(reviews=[_item(r) for r in page.reviews], next_cursor=page.next_cursor)


@router.get(
    "/reviews/{run_id}",
    response_model=ReviewDetailOut,
    summary="One review: the document, what the step read and gave, why, and the history",
    responses=error_responses(404, 409, 422, 503),
)
def read_review(run_id: str, resources: ResourcesDep, caller: CallerDep) -> ReviewDetailOut:
    detail = actions.review_detail(resources=resources, caller=caller, run_id=run_id)
    return ReviewDetailOut.model_validate(
        {
            **detail.__dict__,
            "review": _item(detail.summary),
            "output_schema": dict(detail.output_schema),
        }
    )


@router.post(
    "/runs/{run_id}/review",
    response_model=RunStatusOut,
    summary="Decide a review: approve (as it is or edited), retry, or reject",
    responses=error_responses(404, 409, 413, 415, 422, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request_body_schema(DecisionIn)}},
        }
    },
)
async def decide_review(
    run_id: str,
    body: Annotated[bytearray, Depends(_decision_body)],
    resources: ResourcesDep,
    caller: CallerDep,
) -> RunStatusOut:
    """409 for a stale revision (``current_revision`` and ``decisions_since`` say what
    changed; of two reviewers the second sees the first's decision) or a run awaiting no
    review; 422 for an output that breaks the step's schema (``errors``: per field). A
    heavy request (docpipe_api.heavy): 503 with Retry-After when the process has as many
    as it may."""

    def decide() -> RunStatusOut:
        return actions.decide_review(
            resources=resources,
            caller=caller,
            run_id=run_id,
            decision=parsed_json_in_turn(DecisionIn, body),
        )

    return await resources.heavy.run("deciding a review", decide)


def _item(summary: reviews.ReviewSummary) -> ReviewItemOut:
    since = summary.waiting_since or datetime.now(UTC)
    return ReviewItemOut.model_validate(
        {
            **summary.__dict__,
            "waiting_since": since,
            "age_s": round((datetime.now(UTC) - since).total_seconds(), 3),
        }
    )
