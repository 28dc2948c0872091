"""The review queue and one review: the document beside the form generated from the step's
output schema, and the decision, made by the same action as the API's (docpipe_api.actions).
A stale revision (409) and an edit that breaks the schema (422, by field) come back as the
page with the reviewer's values kept and the error shown where it belongs; nothing is
decided."""

from __future__ import annotations

import logging
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError

from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.pipelines.catalog import Catalog
from docpipe.state import reviews
from docpipe.state.review_queue import QueueOrder
from docpipe.statuses import DecisionAction, ReviewReason
from docpipe_api import actions
from docpipe_api.deps import ResourcesDep
from docpipe_api.errors import describe_validation_errors
from docpipe_api.resources import Caller, Resources
from docpipe_api.review_schemas import DecisionIn
from docpipe_api.ui.deps import Form, FormDep, UiCallerDep
from docpipe_api.ui.form_values import output_from_form
from docpipe_api.ui.pages import go_to, render, render_error
from docpipe_api.ui.queue_view import MAX_QUEUE_CHARS, QueueView, queue_view
from docpipe_api.ui.review_view import review_view

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter()

Filter = Annotated[str, Query(max_length=200)]
# A form field naming a value's new quote: ``quote:<the value's JSON Pointer>``.
_QUOTE = "quote:"


@router.get("/reviews")
def queue_page(
    request: Request,
    resources: ResourcesDep,
    caller: UiCallerDep,
    pipeline: Filter = "",
    step: Filter = "",
    reason: Filter = "",
    batch_id: Filter = "",
    order: Filter = "",
    cursor: Filter = "",
    decided: Filter = "",
) -> Response:
    """The queue with the filters of GET /reviews (empty: any), its counts by pipeline and
    reason, sorted oldest first (paged), or by pipeline or reason; ``decided``: the run a
    decision just left (approve and next, with no other run waiting)."""
    queue = queue_view(pipeline=pipeline, step=step, reason=reason, batch_id=batch_id, order=order)
    page = actions.list_reviews(
        resources=resources,
        caller=caller,
        where=queue.where,
        order=queue.order,
        cursor=cursor or None,
    )
    counts = actions.review_counts(resources=resources, caller=caller, where=queue.where)
    pipelines = resources.pipelines
    return render(
        request,
        "queue.html",
        {
            "reviews": page.reviews,
            "next_cursor": page.next_cursor,
            "queue": queue,
            "counts": counts,
            "orders": list(QueueOrder),
            "decided": decided,
            "pipelines": sorted(pipelines.by_key),
            "steps": sorted({name for p in pipelines for name in p.step_names}),
            "reasons": list(ReviewReason),
        },
    )


@router.get("/reviews/{run_id}")
def review_page(
    request: Request,
    run_id: str,
    resources: ResourcesDep,
    caller: UiCallerDep,
    page: Annotated[int | None, Query(ge=-1_000_000, le=1_000_000)] = None,
    queue: Annotated[str, Query(max_length=MAX_QUEUE_CHARS)] = "",
) -> Response:
    """The review; ``queue``: the queue it was opened from (its filters and order), where
    "approve and next" goes on."""
    seen = queue_view(query=queue)
    detail = actions.review_detail(resources=resources, caller=caller, run_id=run_id)
    view = review_view(detail, page=page, step_names=_step_names(resources.pipelines, detail))
    status = 404 if view.page_error else 200
    return _render_review(request, view, resources, caller, seen, status_code=status)


@router.get("/documents/{document_id}/pages/{page}")
async def page_image(
    document_id: str,
    page: Annotated[int, Path(ge=1, le=100_000)],
    resources: ResourcesDep,
    caller: UiCallerDep,
) -> Response:
    """The page image beside the form: GET /documents/{id}/pages/{n} for the signed-in
    tenant (a page the document lacks is the not-found page; the review shows its text)."""
    return await actions.read_page_image(
        resources=resources, caller=caller, document_id=document_id, page=page
    )


@router.post("/reviews/{run_id}")
def decide(
    request: Request, run_id: str, form: FormDep, resources: ResourcesDep, caller: UiCallerDep
) -> Response:
    """Approve (with the form's values), retry or reject, as POST /runs/{id}/review; then
    the run's page, or with ``next`` the queue's next review (or the queue, when none
    waits)."""
    action = form.get("action")
    queue = queue_view(query=form.get("queue"))
    try:
        detail = actions.review_detail(resources=resources, caller=caller, run_id=run_id)
    except ConflictError:
        # The run awaits no review (any more): the decision, refused on its revision, names
        # the one that was made meanwhile.
        try:
            _decide(resources, caller, run_id, _decision(form, action, None))
        except reviews.StaleReviewError as exc:
            return render_error(
                request, 409, "This review was decided", f"{exc} Nothing was decided."
            )
        raise
    names = _step_names(resources.pipelines, detail)
    values: dict[str, Any] | None = None
    if action == DecisionAction.APPROVE:
        hidden = ("evidence",) if detail.evidence else ()
        values, unreadable = output_from_form(
            detail.output_schema, detail.output, form.fields, hidden=hidden
        )
        if unreadable:
            typed = {e["path"]: form.get(f"value:{e['path']}") for e in unreadable}
            view = review_view(
                detail, values=values, errors=unreadable, typed=typed, step_names=names
            )
            problem = "Some values cannot be read; nothing was decided."
            return _render_review(
                request, view, resources, caller, queue, status_code=422, problem=problem
            )
    try:
        body = _decision(form, action, values if values != detail.output else None)
        _decide(resources, caller, run_id, body)
    except reviews.StaleReviewError as exc:
        log.info("web pages: a stale decision on run %s: %s", run_id, exc)
        return _stale(request, exc, resources, caller, run_id, queue)
    except InvalidRequestError as exc:
        errors = (exc.details or {}).get("errors", [])
        view = review_view(detail, values=values, errors=errors, step_names=names)
        problem = f"{exc} Nothing was decided."
        return _render_review(
            request, view, resources, caller, queue, status_code=422, problem=problem
        )
    if not form.get("next"):
        return go_to(request, f"/runs/{run_id}")
    after = actions.next_review(
        resources=resources, caller=caller, where=queue.where, order=queue.order, after=run_id
    )
    if after is None:
        return go_to(request, f"/reviews?{queue.query(decided=run_id)}")
    return go_to(request, f"/reviews/{after}?{urlencode({'queue': queue.query()})}")


def _decide(resources: Resources, caller: Caller, run_id: str, decision: DecisionIn) -> None:
    actions.decide_review(resources=resources, caller=caller, run_id=run_id, decision=decision)


def _decision(form: Form, action: str, output: dict[str, Any] | None) -> DecisionIn:
    """The form's decision, with the passages the reviewer chose as values' quotes
    (``quote:<pointer>`` = ``<start>-<end>``, set by the page's script)."""
    try:
        revision = int(form.get("revision"))
    except ValueError:
        raise InvalidRequestError("revision: the form's revision is missing") from None
    fields: dict[str, dict[str, Any]] = {
        DecisionAction.APPROVE: {"output": output, "quotes": _quotes(form)},
        DecisionAction.RETRY: {
            "from_step": form.get("from_step") or None,
            "model": form.get("model") or None,
        },
        DecisionAction.REJECT: {"reason": form.get("reason").strip() or None},
    }
    if action not in fields:
        raise InvalidRequestError("action: approve, retry or reject")
    try:
        return DecisionIn.model_validate(
            {"revision": revision, "action": action, **fields[DecisionAction(action)]}
        )
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_errors(exc.errors())) from None


def _quotes(form: Form) -> list[dict[str, Any]]:
    quotes = []
    for name, span in form.fields:
        if name.startswith(_QUOTE):
            start, sep, end = span.partition("-")
            if not (sep and start.isdigit() and end.isdigit()):
                raise InvalidRequestError(f"{name}: a quote is <start>-<end>, not {span[:40]!r}")
            quotes.append({"path": name[len(_QUOTE) :], "start": int(start), "end": int(end)})
    return quotes


def _stale(
    request: Request,
    exc: reviews.StaleReviewError,
    resources: Resources,
    caller: Caller,
    run_id: str,
    queue: QueueView,
) -> Response:
    """The review as it is now, with what changed; or, once it awaits no review, why."""
    problem = f"{exc} Nothing was decided."
    try:
        detail = actions.review_detail(resources=resources, caller=caller, run_id=run_id)
    except ConflictError:
        return render_error(request, 409, "This review was decided", problem)
    view = review_view(detail, step_names=_step_names(resources.pipelines, detail))
    return _render_review(request, view, resources, caller, queue, status_code=409, problem=problem)


def _step_names(pipelines: Catalog, detail: reviews.ReviewDetail) -> list[str]:
    pipeline = pipelines.by_key.get(detail.summary.pipeline)
    return list(pipeline.step_names) if pipeline else []


def _render_review(
    request: Request,
    view: Any,
    resources: Resources,
    caller: Caller,
    queue: QueueView,
    *,
    status_code: int,
    problem: str | None = None,
) -> Response:
    counts = actions.review_counts(resources=resources, caller=caller, where=queue.where)
    context = {
        "view": view,
        "review": view.detail.summary,
        "problem": problem,
        "queue": queue,
        "waiting": counts.waiting,
    }
    return render(request, "review.html", context, status_code=status_code)
