"""What happens once a transaction that changed runs has committed, written once for every
caller (the API's actions, the worker's tasks, beat's periodic work).

A transaction leaves an :class:`AfterCommit`: the outbox rows it wrote, to publish by id;
the messages its statement returned whole, to publish without a round trip; whether a slot
of the batch admission window opened or a batch-lane run waits for one; and the runs it
created, to count, with the steps create_run did itself, to trace. :func:`dispatch_after_commit`
does all of it, in that order: the counts first (they are true from the commit on), then
the publishes, then admission. Nothing here raises for the broker or the database: the
state is committed, a lost publish is swept and a missed admission is beat's next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from docpipe.broker.messages import Broker, Message
from docpipe.observability import metrics, tracing
from docpipe.settings import Settings
from docpipe.state.admission import admit_and_publish
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox, publish_written

__all__ = ["AfterCommit", "CreatedRuns", "dispatch_after_commit"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CreatedRuns:
    """Runs a transaction created: how many, of which pipeline and lane, and the steps
    create_run did itself ((run_id, step): a known text's extract_text), which no task ran."""

    pipeline: str
    lane: str
    count: int = 1
    inline_steps: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AfterCommit:
    """What a committed transaction leaves to do."""

    outbox_ids: Sequence[int] = ()  # rows to publish by id (publish_outbox)
    messages: Sequence[Message] = ()  # rows its statement returned whole (publish_written)
    admit: bool = False  # fill the batch admission window now, not at beat's next tick
    created: CreatedRuns | None = None


def dispatch_after_commit(
    db: Database, broker: Broker, settings: Settings, after: AfterCommit
) -> int:
    """Count and trace what was created, publish what was written, admit batch runs if
    asked; returns how many messages went out (the admitted runs' first steps included)."""
    if after.created is not None:
        _observe_created(after.created)
    sent = publish_outbox(db, broker, after.outbox_ids) + publish_written(broker, after.messages)
    if after.admit:
        try:
            sent += admit_and_publish(db, broker, settings)
        except psycopg.Error:
            log.warning("admission left to beat's next tick", exc_info=True)
    return sent


def _observe_created(created: CreatedRuns) -> None:
    metrics.metrics().runs_created.labels(created.pipeline, created.lane).inc(created.count)
    for run_id, step in created.inline_steps:
        # Its span is the creating request's (see docpipe.observability.tracing).
        tracing.record_inline_step(run_id, step)
        metrics.observe_step(created.pipeline, step, created.lane, "completed", None, 0.0)
