"""The review queue and one review: the document beside the form generated from the step's
output schema, and the decision, made by the API route's own function. A stale revision
(409) and an edit that breaks the schema (422, by field) come back as the page with the
reviewer's values kept and the error shown where it belongs; nothing is decided."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError

from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.state import reviews
from docpipe.statuses import DecisionAction, ReviewReason
from docpipe_api.deps import ApiKeyIdDep, BrokerDep, DatabaseDep, PipelinesDep, SettingsDep
from docpipe_api.errors import describe_validation_errors
from docpipe_api.review_schemas import DecisionIn
from docpipe_api.routes import reviews as api
from docpipe_api.ui.deps import Form, FormDep, UiTenantDep
from docpipe_api.ui.form_values import output_from_form
from docpipe_api.ui.pages import go_to, render, render_error
from docpipe_api.ui.review_view import review_view

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter()

Filter = Annotated[str, Query(max_length=200)]


@router.get("/reviews")
def queue_page(
    request: Request,
    db: DatabaseDep,
    pipelines: PipelinesDep,
    tenant: UiTenantDep,
    pipeline: Filter = "",
    step: Filter = "",
    reason: Filter = "",
    batch_id: Filter = "",
    cursor: Filter = "",
) -> Response:
    """Oldest first; the filters of GET /reviews, an empty one meaning "any"."""
    if reason and reason not in set(ReviewReason):
        raise InvalidRequestError(f"reason: one of {', '.join(ReviewReason)}")
    page = reviews.list_reviews(db, tenant, pipeline=pipeline or None, step=step or None,
                                reason=reason or None, batch_id=batch_id or None,
                                cursor=cursor or None)  # fmt: skip
    steps = sorted({name for p in pipelines for name in p.step_names})
    return render(request, "queue.html", {
        "reviews": page.reviews, "next_cursor": page.next_cursor,
        "filters": {"pipeline": pipeline, "step": step, "reason": reason, "batch_id": batch_id},
        "pipelines": sorted(pipelines.by_key), "steps": steps, "reasons": list(ReviewReason),
    })  # fmt: skip


@router.get("/reviews/{run_id}")
def review_page(
    request: Request,
    run_id: str,
    db: DatabaseDep,
    pipelines: PipelinesDep,
    settings: SettingsDep,
    tenant: UiTenantDep,
    page: Annotated[int | None, Query(ge=-1_000_000, le=1_000_000)] = None,
) -> Response:
    detail = reviews.review_detail(db, tenant, run_id, pipelines=pipelines,
                                   models=settings.provider_table.models)  # fmt: skip
    view = review_view(detail, page=page, step_names=_step_names(pipelines, detail))
    return _render_review(request, view, status_code=404 if view.page_error else 200)


@router.post("/reviews/{run_id}")
def decide(
    request: Request,
    run_id: str,
    form: FormDep,
    db: DatabaseDep,
    broker: BrokerDep,
    pipelines: PipelinesDep,
    settings: SettingsDep,
    tenant: UiTenantDep,
    key_id: ApiKeyIdDep,
) -> Response:
    """Approve (with the form's values), retry or reject, as POST /runs/{id}/review."""
    models = settings.provider_table.models
    action = form.get("action")
    try:
        detail = reviews.review_detail(db, tenant, run_id, pipelines=pipelines, models=models)
    except ConflictError:
        # The run awaits no review (any more): the decision, refused on its revision, names
        # the one that was made meanwhile.
        try:
            api.decide_review(run_id, _decision(form, action, None), db, broker, pipelines,
                              settings, tenant, key_id)  # fmt: skip
        except reviews.StaleReviewError as exc:
            return render_error(request, 409, "This review was decided",
                                f"{exc} Nothing was decided.")  # fmt: skip
        raise
    names = _step_names(pipelines, detail)
    values: dict[str, Any] | None = None
    if action == DecisionAction.APPROVE:
        hidden = ("evidence",) if detail.evidence else ()
        values, unreadable = output_from_form(detail.output_schema, detail.output, form.fields,
                                              hidden=hidden)  # fmt: skip
        if unreadable:
            typed = {e["path"]: form.get(f"value:{e['path']}") for e in unreadable}
            view = review_view(detail, values=values, errors=unreadable, typed=typed,
                               step_names=names)  # fmt: skip
            problem = "Some values cannot be read; nothing was decided."
            return _render_review(request, view, status_code=422, problem=problem)
    try:
        body = _decision(form, action, values if values != detail.output else None)
        api.decide_review(run_id, body, db, broker, pipelines, settings, tenant, key_id)
    except reviews.StaleReviewError as exc:
        log.info("web pages: a stale decision on run %s: %s", run_id, exc)
        return _stale(request, exc, db, tenant, run_id, pipelines, models)
    except InvalidRequestError as exc:
        errors = (exc.details or {}).get("errors", [])
        view = review_view(detail, values=values, errors=errors, step_names=names)
        return _render_review(request, view, status_code=422,
                              problem=f"{exc} Nothing was decided.")  # fmt: skip
    return go_to(request, f"/runs/{run_id}")


def _decision(form: Form, action: str, output: dict[str, Any] | None) -> DecisionIn:
    try:
        revision = int(form.get("revision"))
    except ValueError:
        raise InvalidRequestError("revision: the form's revision is missing") from None
    fields: dict[str, dict[str, Any]] = {
        DecisionAction.APPROVE: {"output": output},
        DecisionAction.RETRY: {"from_step": form.get("from_step") or None,
                               "model": form.get("model") or None},
        DecisionAction.REJECT: {"reason": form.get("reason").strip() or None},
    }  # fmt: skip
    if action not in fields:
        raise InvalidRequestError("action: approve, retry or reject")
    try:
        return DecisionIn.model_validate({"revision": revision, "action": action,
                                          **fields[DecisionAction(action)]})  # fmt: skip
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_errors(exc.errors())) from None


def _stale(
    request: Request,
    exc: reviews.StaleReviewError,
    db: DatabaseDep,
    tenant: str,
    run_id: str,
    pipelines: PipelinesDep,
    models: Any,
) -> Response:
    """The review as it is now, with what changed; or, once it awaits no review, why."""
    problem = f"{exc} Nothing was decided."
    try:
        detail = reviews.review_detail(db, tenant, run_id, pipelines=pipelines, models=models)
    except ConflictError:
        return render_error(request, 409, "This review was decided", problem)
    view = review_view(detail, step_names=_step_names(pipelines, detail))
    return _render_review(request, view, status_code=409, problem=problem)


def _step_names(pipelines: PipelinesDep, detail: reviews.ReviewDetail) -> list[str]:
    pipeline = pipelines.by_key.get(detail.summary.pipeline)
    return list(pipeline.step_names) if pipeline else []


def _render_review(
    request: Request, view: Any, *, status_code: int, problem: str | None = None
) -> Response:
    return render(request, "review.html", {"view": view, "review": view.detail.summary,
                  "problem": problem}, status_code=status_code)  # fmt: skip
