"""The review queue: runs awaiting a person, one review with what it needs, a decision."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from pydantic import ValidationError

from docpipe.errors import InvalidRequestError
from docpipe.pipelines.edits import Edit
from docpipe.pipelines.model import NAME_PATTERN
from docpipe.state import reviews
from docpipe.state.admission import admit_after_commit
from docpipe.state.outbox import publish_outbox
from docpipe.statuses import ReviewReason
from docpipe_api.deps import (
    ApiKeyIdDep,
    BrokerDep,
    DatabaseDep,
    PipelinesDep,
    SettingsDep,
    TenantDep,
    read_capped,
    require_json,
)
from docpipe_api.errors import describe_validation_errors, error_responses
from docpipe_api.review_schemas import DecisionIn, ReviewDetailOut, ReviewItem, ReviewPageOut
from docpipe_api.routes.runs import run_status
from docpipe_api.schemas import UUID_PATTERN, RunStatus, request_body_schema

__all__ = ["router"]

router = APIRouter(tags=["reviews"])

# A decision carries at most one step's output (as edited), which is far below this.
MAX_DECISION_BYTES = 8 * 1024 * 1024


async def _decision(request: Request) -> DecisionIn:
    require_json(request)
    body = await read_capped(request, MAX_DECISION_BYTES)
    try:
        return DecisionIn.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_errors(exc.errors(), prefix="body")) from None


@router.get(
    "/reviews",
    response_model=ReviewPageOut,
    summary="The runs awaiting a person, oldest first",
    responses=error_responses(422, 503),
)
def list_reviews(
    db: DatabaseDep,
    tenant: TenantDep,
    pipeline: Annotated[str | None, Query(max_length=200, description="a pipeline key")] = None,
    step: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    reason: ReviewReason | None = None,
    batch_id: Annotated[str | None, Query(pattern=f"^{UUID_PATTERN}$")] = None,
    cursor: Annotated[
        str | None,
        Query(pattern=reviews.CURSOR_PATTERN, description="next_cursor of the page before"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=reviews.MAX_PAGE)] = 50,
) -> ReviewPageOut:
    page = reviews.list_reviews(db, tenant, pipeline=pipeline, step=step, reason=reason,
                                batch_id=batch_id, cursor=cursor, limit=limit)  # fmt: skip
    return ReviewPageOut(reviews=[_item(r) for r in page.reviews], next_cursor=page.next_cursor)


@router.get(
    "/reviews/{run_id}",
    response_model=ReviewDetailOut,
    summary="One review: the document, what the step read and gave, why, and the history",
    responses=error_responses(404, 409, 422, 503),
)
def read_review(
    run_id: str, db: DatabaseDep, tenant: TenantDep, pipelines: PipelinesDep, settings: SettingsDep
) -> ReviewDetailOut:
    detail = reviews.review_detail(db, tenant, run_id, pipelines=pipelines,
                                   models=settings.provider_table.models)  # fmt: skip
    return ReviewDetailOut.model_validate(
        {
            **detail.__dict__,
            "review": _item(detail.summary),
            "output_schema": dict(detail.output_schema),
        }
    )


@router.post(
    "/runs/{run_id}/review",
    response_model=RunStatus,
    summary="Decide a review: approve (as it is or edited), retry, or reject",
    responses=error_responses(404, 409, 413, 415, 422, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request_body_schema(DecisionIn)}},
        }
    },
)
def decide_review(
    run_id: str,
    body: Annotated[DecisionIn, Depends(_decision)],
    db: DatabaseDep,
    broker: BrokerDep,
    pipelines: PipelinesDep,
    settings: SettingsDep,
    tenant: TenantDep,
    key_id: ApiKeyIdDep,
) -> RunStatus:
    """409 for a stale revision (``current_revision`` and ``decisions_since`` say what
    changed; of two reviewers the second sees the first's decision) or a run awaiting no
    review; 422 for an output that breaks the step's schema (``errors``: per field)."""
    decision = reviews.DecisionRequest(
        revision=body.revision,
        action=body.action,
        output=body.output,
        edits=tuple(Edit(e.path, e.action, e.value) for e in body.edits),
        from_step=body.from_step,
        model=body.model,
        reason=body.reason,
    )
    decided = reviews.decide(db, tenant, run_id, decision, reviewer=reviews.Reviewer(key_id),
                             pipelines=pipelines,
                             models=settings.provider_table.models)  # fmt: skip
    publish_outbox(db, broker, decided.outbox_ids)
    if decided.admit:
        admit_after_commit(db, broker, settings)
    return run_status(db, tenant, run_id)


def _item(summary: reviews.ReviewSummary) -> ReviewItem:
    since = summary.waiting_since or datetime.now(UTC)
    return ReviewItem.model_validate(
        {
            **summary.__dict__,
            "waiting_since": since,
            "age_s": round((datetime.now(UTC) - since).total_seconds(), 3),
        }
    )
