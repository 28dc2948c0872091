"""How a claimed step ends when it does not succeed: handed back to be tried again, stopped,
failed, or paused for a person; and what a delivery's outcome is (:class:`StepOutcome`).

The retry policy is written here, once (:meth:`StepEndings.hand_back`): how long a step
waits before it is tried again (backoff with jitter and Retry-After, the shared limiter, a
message ahead of its time, PostgreSQL unreachable) and whether that wait is a countdown of
the same message in Redis or, past DOCPIPE_PARK_DELAYS_OVER_S, a message parked in
PostgreSQL, written by the statement that gives the step back (one commit: no moment when
the step is pending without a way back). The Celery task only turns the outcome into
Celery's terms (docpipe.worker.tasks).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from docpipe.backoff import retry_delay
from docpipe.broker.messages import Message
from docpipe.errors import (
    BudgetExceededError,
    InvalidOutputError,
    PermanentLLMError,
    RunStoppedError,
    TransientLLMError,
    UnreadableDocumentError,
    WaitingForProviderBatch,
)
from docpipe.pipelines.model import Pipeline, Step
from docpipe.settings import Settings
from docpipe.state import runs
from docpipe.state.batches import stop_batch
from docpipe.state.db import Database
from docpipe.statuses import BatchStatus, ReviewReason, RunStatus
from docpipe.worker.text_extraction import ExtractionContinues

__all__ = ["OutcomeKind", "StepEndings", "StepOutcome", "StepPlan"]

log = logging.getLogger(__name__)

OutcomeKind = Literal["completed", "already_done", "busy", "stopped", "retry", "parked", "failed"]


@dataclass(frozen=True)
class StepOutcome:
    """What came of one delivery of a step's message. ``retry_in_s``: when the step is
    tried again (retry, busy: by this message after a countdown; parked: by a message
    waiting in PostgreSQL, published by the outbox sweep once due)."""

    kind: OutcomeKind
    run_status: str | None = None
    next_step: str | None = None
    retry_in_s: float | None = None
    messages: tuple[Message, ...] = ()  # to publish: docpipe.state.after_commit
    calls_sent: int = 0
    error: str | None = None
    lane: str | None = None  # of the claimed run

    @property
    def countdown_s(self) -> float | None:
        """Seconds after which this message is to be delivered again; None: never."""
        return self.retry_in_s if self.kind in ("retry", "busy") else None


@dataclass(frozen=True)
class StepPlan:
    """What a claimed step runs: its pipeline, its definition and its attempts."""

    pipeline: Pipeline
    spec: Step
    max_attempts: int


class StepEndings:
    """The ends of the steps one worker process claims (as ``owner``)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        owner: str,
        interruptions: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.db = db
        self.settings = settings
        self.owner = owner
        # Exceptions that stop a step from outside (Celery's soft time limit): the step is
        # handed back like after a transient error, and memoised calls keep what was done.
        self.interruptions = interruptions

    def after_failure(
        self,
        claim: runs.Claim,
        plan: StepPlan,
        exc: BaseException,
        calls_sent: int,
        output: dict[str, Any] | None,
    ) -> StepOutcome:
        """What a step that raised comes to: tried again (now, later, or without counting
        the attempt), stopped, failed, or paused for a person."""
        if isinstance(exc, WaitingForProviderBatch):
            # Its calls wait for provider batches: parked in PostgreSQL, holding no slot and
            # no message, until the poller wakes it (or, failing that, for a recheck).
            return self.hand_back(
                claim,
                self.settings.provider_batch_recheck_s,
                str(exc),
                calls_sent,
                refund_attempt=True,
                park=True,
            )
        if isinstance(exc, ExtractionContinues):
            # Pages were read and recorded, the task's time is up: the step goes on in its
            # next delivery at once, without using up an attempt (it made progress).
            return self.hand_back(claim, 0.0, str(exc), calls_sent, refund_attempt=True)
        if isinstance(exc, UnreadableDocumentError):
            return self.fail(claim, RunStatus.FAILED, str(exc), calls_sent)
        if isinstance(exc, TransientLLMError):
            if exc.kind == "throttled" or not exc.counts_as_attempt:
                return self._wait_for_provider(claim, exc, calls_sent)
            return self._retry_or_give_up(claim, plan, str(exc), exc.retry_after, calls_sent)
        if isinstance(exc, self.interruptions):
            return self._retry_or_give_up(claim, plan, f"interrupted: {exc!r}", None, calls_sent)
        if isinstance(exc, RunStoppedError):
            runs.abandon_step(self.db, claim.run_id, claim.step, owner=self.owner)
            return StepOutcome("stopped", calls_sent=calls_sent, error="run stopped")
        if isinstance(exc, BudgetExceededError):
            return self._stop_for_budget(claim, exc, calls_sent)
        if isinstance(exc, InvalidOutputError):
            return self.review(
                claim, ReviewReason.INVALID_OUTPUT, str(exc), calls_sent, output=output
            )
        if isinstance(exc, PermanentLLMError):
            return self.fail(claim, RunStatus.FAILED, str(exc), calls_sent)
        # The step's own code failed (a pipeline author's bug or refusal): running it again
        # would fail the same way, so the run fails with what it said.
        log.error("step %s/%s raised", claim.run_id, claim.step, exc_info=exc)
        error = f"step {claim.step} raised {type(exc).__name__}: {exc}"
        return self.fail(claim, RunStatus.FAILED, error, calls_sent)

    def wait_until_due(self, run_id: str, step: str, delay: float) -> StepOutcome:
        """A message ahead of its step's time: this one again after a countdown, or one
        parked in PostgreSQL when the wait is long."""
        if delay <= self.settings.park_delays_over_s:
            return StepOutcome("retry", retry_in_s=delay, error="not due yet")
        due = datetime.now(UTC) + timedelta(seconds=delay)
        with self.db.transaction() as tx:
            runs.enqueue_step(tx, run_id, step, available_at=due)
        return StepOutcome("parked", retry_in_s=delay, error="not due yet")

    def _wait_for_provider(
        self, claim: runs.Claim, exc: TransientLLMError, calls_sent: int
    ) -> StepOutcome:
        """The step waited for the shared limiter too long, or the provider is down for
        everyone: hand it back without counting the attempt, so an outage delays runs
        instead of failing them."""
        delay = (exc.retry_after or 1.0) * random.uniform(1.0, 1.5)
        return self.hand_back(claim, delay, str(exc), calls_sent, refund_attempt=True)

    def _retry_or_give_up(
        self,
        claim: runs.Claim,
        plan: StepPlan,
        error: str,
        retry_after: float | None,
        calls_sent: int,
    ) -> StepOutcome:
        if claim.attempt >= plan.max_attempts:
            error = f"gave up after {claim.attempt} attempts: {error}"
            return self.review(claim, ReviewReason.ATTEMPTS_EXHAUSTED, error, calls_sent)
        delay = retry_delay(
            claim.attempt,
            base_s=self.settings.retry_backoff_base_s,
            cap_s=self.settings.retry_backoff_cap_s,
            retry_after_s=retry_after,
        )
        log.info(
            "step %s/%s attempt %d: retry in %.2fs: %s",
            claim.run_id,
            claim.step,
            claim.attempt,
            delay,
            error,
        )
        return self.hand_back(claim, delay, error, calls_sent)

    def hand_back(
        self,
        claim: runs.Claim,
        retry_in_s: float,
        error: str,
        calls_sent: int,
        *,
        refund_attempt: bool = False,
        park: bool = False,
    ) -> StepOutcome:
        """Give the leased step back, to be tried again in ``retry_in_s``: by this message
        after a countdown, or, past DOCPIPE_PARK_DELAYS_OVER_S, by a message parked in
        PostgreSQL in the same statement (a countdown that long would sit in Redis, and be
        handed out again after its visibility timeout). ``refund_attempt``: the step never
        got to fail (it made progress, or only waited for a slot). ``park``: in PostgreSQL
        whatever the wait."""
        park = park or retry_in_s > self.settings.park_delays_over_s
        released = runs.release_step(
            self.db,
            claim.run_id,
            claim.step,
            owner=self.owner,
            retry_in_s=retry_in_s,
            error=error,
            worked_s=claim.working_s(),
            refund_attempt=refund_attempt,
            park=park,
        )
        if not released:
            return self.stopped(claim, calls_sent)
        kind: OutcomeKind = "parked" if park else "retry"
        return StepOutcome(kind, retry_in_s=retry_in_s, calls_sent=calls_sent, error=error)

    def stopped(self, claim: runs.Claim, calls_sent: int) -> StepOutcome:
        """The step could not be handed back: its run ended meanwhile (the step is dropped
        with it) or another worker holds its lease (nothing to do)."""
        runs.abandon_step(self.db, claim.run_id, claim.step, owner=self.owner)
        return StepOutcome("stopped", calls_sent=calls_sent, error="run ended or lease lost")

    def _stop_for_budget(
        self, claim: runs.Claim, exc: BudgetExceededError, calls_sent: int
    ) -> StepOutcome:
        if exc.scope == "batch" and claim.batch_id is not None:
            stop_batch(
                self.db,
                claim.tenant_id,
                claim.batch_id,
                status=BatchStatus.BUDGET_EXCEEDED,
                reason=str(exc),
            )
            runs.abandon_step(self.db, claim.run_id, claim.step, owner=self.owner)
            log.warning("batch %s stopped: %s", claim.batch_id, exc)
            return StepOutcome(
                "failed",
                run_status=RunStatus.BUDGET_EXCEEDED,
                calls_sent=calls_sent,
                error=str(exc),
            )
        return self.fail(claim, RunStatus.BUDGET_EXCEEDED, str(exc), calls_sent)

    def fail(self, claim: runs.Claim, status: str, error: str, calls_sent: int = 0) -> StepOutcome:
        runs.fail_run(
            self.db, claim.run_id, claim.step, owner=self.owner, status=status, error=error
        )
        log.warning("run %s %s at %s: %s", claim.run_id, status, claim.step, error)
        return StepOutcome("failed", run_status=status, calls_sent=calls_sent, error=error)

    def review(
        self,
        claim: runs.Claim,
        reason: ReviewReason,
        error: str,
        calls_sent: int = 0,
        *,
        output: dict[str, Any] | None = None,
    ) -> StepOutcome:
        """The step cannot succeed by itself: the run pauses for a person at this step,
        with the step's last output (if any) and what it read."""
        runs.fail_run(
            self.db,
            claim.run_id,
            claim.step,
            owner=self.owner,
            status=RunStatus.NEEDS_REVIEW,
            error=error,
            review_reason=reason,
            output=output,
            input_hash=claim.input_hash,
        )
        log.warning("run %s needs_review at %s (%s): %s", claim.run_id, claim.step, reason, error)
        return StepOutcome(
            "failed", run_status=RunStatus.NEEDS_REVIEW, calls_sent=calls_sent, error=error
        )
