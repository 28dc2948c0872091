"""The review queue, one review with what a person needs to decide, and the decision."""

from __future__ import annotations

from docpipe.pipelines.edits import Edit, ReviewerQuote
from docpipe.state import review_queue, reviews
from docpipe.state.after_commit import AfterCommit, dispatch_after_commit
from docpipe_api.actions.runs import run_status
from docpipe_api.resources import Caller, Resources
from docpipe_api.review_schemas import DecisionIn
from docpipe_api.schemas import RunStatusOut

__all__ = ["decide_review", "list_reviews", "next_review", "review_counts", "review_detail"]


def list_reviews(
    *,
    resources: Resources,
    caller: Caller,
    where: reviews.QueueFilter,
    order: review_queue.QueueOrder = review_queue.QueueOrder.OLDEST,
    cursor: str | None = None,
    limit: int = 50,
) -> reviews.ReviewPage:
    """The runs of the caller's tenant awaiting a person (``where`` says which), in
    ``order`` (oldest first: ``limit`` at a time after ``cursor``)."""
    return review_queue.queue_page(
        resources.database, caller.tenant, where, order, cursor=cursor, limit=limit
    )


def review_counts(
    *, resources: Resources, caller: Caller, where: reviews.QueueFilter
) -> review_queue.QueueCounts:
    """How many of the caller's tenant's runs await a person, by pipeline and reason."""
    return review_queue.queue_counts(resources.database, caller.tenant, where)


def next_review(
    *,
    resources: Resources,
    caller: Caller,
    where: reviews.QueueFilter,
    order: review_queue.QueueOrder,
    after: str,
) -> str | None:
    """The run to review after ``after`` in the queue as the reviewer sees it, or None."""
    return review_queue.next_review(resources.database, caller.tenant, where, order, after=after)


def review_detail(*, resources: Resources, caller: Caller, run_id: str) -> reviews.ReviewDetail:
    """One review: the document, what the step read and gave, why, and the history.
    ConflictError once the run awaits no review."""
    return reviews.review_detail(
        resources.database,
        caller.tenant,
        run_id,
        pipelines=resources.pipelines,
        models=resources.settings.provider_table.models,
    )


def decide_review(
    *, resources: Resources, caller: Caller, run_id: str, decision: DecisionIn
) -> RunStatusOut:
    """Approve (as it is or edited), retry or reject, recorded as the caller's key's
    decision. reviews.StaleReviewError (a ConflictError) for a decision on a revision that
    is no longer the run's; InvalidRequestError for an output that breaks the step's schema
    (``details["errors"]``: per field)."""
    if decision.from_step is not None:
        resources.pipelines.check_step_name(decision.from_step, field="from_step")
    request = reviews.DecisionRequest(
        revision=decision.revision,
        action=decision.action,
        output=decision.output,
        edits=tuple(Edit(e.path, e.action, e.value) for e in decision.edits),
        from_step=decision.from_step,
        model=decision.model,
        reason=decision.reason,
        quotes=tuple(ReviewerQuote(q.path, q.start, q.end) for q in decision.quotes),
    )
    decided = reviews.decide(
        resources.database,
        caller.tenant,
        run_id,
        request,
        reviewer=reviews.Reviewer(caller.key_id),
        pipelines=resources.pipelines,
        models=resources.settings.provider_table.models,
    )
    after = AfterCommit(outbox_ids=decided.outbox_ids, admit=decided.admit)
    dispatch_after_commit(resources.database, resources.broker, resources.settings, after)
    return run_status(resources=resources, caller=caller, run_id=run_id)
