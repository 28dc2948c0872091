"""A run's status (read once, or followed as events), its cancel and its retry from a step."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from fastapi import HTTPException
from fastapi.responses import StreamingResponse

from docpipe import statuses
from docpipe.errors import ConflictError
from docpipe.state import lists, pages, reviews, runs
from docpipe.state.after_commit import AfterCommit, dispatch_after_commit
from docpipe.statuses import DecisionAction, Lane
from docpipe_api.resources import Caller, Resources
from docpipe_api.run_events import EventWatch, event_stream
from docpipe_api.schemas import RunStatusOut

__all__ = ["cancel_run", "retry_run", "run_events", "run_status", "runs_status"]

# Streams end by themselves within DOCPIPE_EVENT_STREAM_MAX_S; a slot may free sooner.
_STREAMS_FULL_RETRY_AFTER_S = 10

# Runs whose step outputs are shown: the result once done, the values with their evidence
# also in review (what a reviewer checks).
_WITH_OUTPUT = (statuses.RunStatus.DONE, statuses.RunStatus.NEEDS_REVIEW)


def run_status(*, resources: Resources, caller: Caller, run_id: str) -> RunStatusOut:
    """The run's status body; the result (step outputs) only once it is done, the values
    with their evidence (and each quote's boxes on its page) once it is done or needs review.
    One read of the run: a poll of a run still going does not carry its outputs out of the
    database. NotFoundError for a run of another tenant."""
    db = resources.database
    found = runs.run_progress(db, caller.tenant, run_id, outputs_of=_WITH_OUTPUT)
    return _with_boxes(resources, caller, [found])[0]


def runs_status(
    *,
    resources: Resources,
    caller: Caller,
    run_ids: list[str],
    filters: lists.RunFilters,
) -> list[RunStatusOut]:
    """Each run as :func:`run_status` gives it, in the order asked, of those ``filters``
    hold; ids of no run of the caller's tenant are left out."""
    db = resources.database
    held = filters.checked()
    found = runs.runs_progress(db, caller.tenant, run_ids, outputs_of=_WITH_OUTPUT)
    return _with_boxes(resources, caller, [p for p in found if held.holds(p)])


def _with_boxes(
    resources: Resources, caller: Caller, found: list[runs.Progress]
) -> list[RunStatusOut]:
    """Status bodies whose values carry the boxes of their quotes (no query without values)."""
    boxed = pages.with_quote_boxes(resources.database, caller.tenant, found)
    return [RunStatusOut.model_validate(p) for p in boxed]


def cancel_run(*, resources: Resources, caller: Caller, run_id: str) -> RunStatusOut:
    """Stop the run: no further step starts. ConflictError once it has ended."""
    db = resources.database
    runs.run_progress(db, caller.tenant, run_id)  # NotFoundError for unknown runs
    if not runs.cancel_run(db, caller.tenant, run_id):
        status = runs.run_progress(db, caller.tenant, run_id).status
        raise ConflictError(f"run {run_id} has already ended ({status}); nothing to cancel")
    return run_status(resources=resources, caller=caller, run_id=run_id)


def retry_run(
    *, resources: Resources, caller: Caller, run_id: str, from_step: str | None
) -> RunStatusOut:
    """Reopen an ended run at ``from_step`` (default: its first step not done), keeping the
    finished steps before it. A run awaiting review is retried as a reviewer's decision
    would retry it, recorded in its audit trail as the caller's key's. A batch-lane run
    waits in PostgreSQL like a new one: admitted at once if the window has room."""
    db, pipelines = resources.database, resources.pipelines
    if from_step is not None:
        pipelines.check_step_name(from_step, field="from_step")
    progress = runs.run_progress(db, caller.tenant, run_id)
    if progress.review is not None:
        steps = pipelines.get(progress.pipeline).step_names
        if from_step is not None and from_step not in steps:
            # Well-formed, but not a step of the run's pipeline: 409, as for an ended run.
            raise ConflictError(
                f"run {run_id}'s pipeline {progress.pipeline} has no step {from_step!r} "
                f"(steps: {', '.join(steps)})"
            )
        retry = reviews.DecisionRequest(
            revision=progress.review["revision"],
            action=DecisionAction.RETRY,
            from_step=from_step,
        )
        decided = reviews.decide(
            db,
            caller.tenant,
            run_id,
            retry,
            reviewer=reviews.Reviewer(caller.key_id),
            pipelines=pipelines,
            models=resources.settings.provider_table.models,
        )
        after = AfterCommit(outbox_ids=decided.outbox_ids, admit=decided.admit)
    else:
        restart = runs.restart_run(db, caller.tenant, run_id, from_step, pipelines=pipelines)
        after = AfterCommit(outbox_ids=restart.outbox_ids, admit=progress.lane == Lane.BATCH)
    dispatch_after_commit(db, resources.broker, resources.settings, after)
    return run_status(resources=resources, caller=caller, run_id=run_id)


def run_events(
    *,
    resources: Resources,
    caller: Caller,
    run_id: str,
    disconnected: Callable[[], Awaitable[bool]],
) -> StreamingResponse:
    """The run's progress as Server-Sent Events (docpipe_api.run_events), in one of the
    stream slots of the caller's key (of its tenant without keys): 429 when they are all
    taken. An unknown run is a NotFoundError, not an empty stream."""
    first = runs.run_progress(resources.database, caller.tenant, run_id)
    slots = resources.stream_slots
    slot = slots.open(f"key:{caller.key_id}" if caller.key_id else f"tenant:{caller.tenant}")
    if slot is None:
        raise HTTPException(
            429,
            f"{'this API key' if caller.key_id else 'this tenant'} has {slots.limit} event "
            f"streams open, the most it may (DOCPIPE_EVENT_STREAMS_PER_KEY); close one first",
            headers={"Retry-After": str(_STREAMS_FULL_RETRY_AFTER_S)},
        )
    watch = EventWatch(
        resources.database,
        caller.tenant,
        caller.key_id,
        slots,
        slot,
        resources.settings.event_stream_max_s,
    )
    final = partial(run_status, resources=resources, caller=caller, run_id=run_id)
    return event_stream(watch, first, final, disconnected)
