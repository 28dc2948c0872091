"""``run_step``: execute one pipeline step at most once to completion, without any broker.

The Celery task is a thin shell around :meth:`StepExecutor.run_step`; tests call it
directly. The outcome says what should happen next (publish the next step, try the message
again after a countdown, nothing), and the state in PostgreSQL already reflects it when it
returns. A claimed step goes: plan (its definition, attempts), run (its calls under its
lease), then record its output, or end otherwise (docpipe.worker.step_endings: the retry
policy, failures, reviews).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import jsonschema
import psycopg

from docpipe.backoff import retry_delay
from docpipe.errors import InvalidOutputError, NotFoundError, UnreadableDocumentError
from docpipe.extraction.limits import too_slow
from docpipe.observability import metrics
from docpipe.pipelines.catalog import Catalog, load_catalog
from docpipe.pipelines.model import Pipeline, Step
from docpipe.pipelines.review import Reason, sample_point
from docpipe.pipelines.text_extraction import EXTRACT_TEXT
from docpipe.providers.calls import StepCalls
from docpipe.providers.client import ChatClient, validate_json
from docpipe.providers.limiter import CallGate
from docpipe.providers.limiter import no_gate as _no_gate
from docpipe.settings import Settings
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.leases import LeaseSession
from docpipe.statuses import ACTIVE_RUN_STATUSES, ReviewReason, RunStatus, StepStatus
from docpipe.worker.lease_keeper import LeaseKeeper
from docpipe.worker.step_endings import StepEndings, StepOutcome, StepPlan
from docpipe.worker.text_extraction import extract_document_text

__all__ = ["StepExecutor", "StepOutcome", "worker_identity"]

log = logging.getLogger(__name__)

# The least wait before a step that was not due looks again (never a busy loop).
_RECHECK_S = 0.05


def worker_identity() -> str:
    """A lease owner name unique to this process (a restarted pid is a new owner)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class StepExecutor:
    """Claims, executes and records steps for one worker process."""

    def __init__(
        self,
        db: Database,
        llm: ChatClient,
        settings: Settings,
        *,
        owner: str | None = None,
        gate: CallGate = _no_gate,
        interruptions: tuple[type[BaseException], ...] = (),
        pipelines: Catalog | None = None,
        leases: LeaseSession | None = None,
    ) -> None:
        self.db = db
        self.llm = llm
        self.settings = settings
        self.pipelines = load_catalog(settings) if pipelines is None else pipelines
        self.owner = owner or worker_identity()
        self.gate = gate
        # Exceptions that stop a step from outside (Celery's soft time limit): the step is
        # handed back like after a transient error, and memoised calls keep what was done.
        self.interruptions = interruptions
        # What a step's run may raise that decides its end (step_endings.after_failure).
        self._ends_step: tuple[type[BaseException], ...] = (Exception, *interruptions)
        self._endings = StepEndings(db, settings, self.owner, interruptions)
        # This process' lease session: its leases end with it (None: with their TTL only).
        self.leases = leases
        self._lease_keeper = LeaseKeeper(db, settings, self.owner, self.lease_session)

    def lease_session(self) -> int | None:
        """The key of this process' lease session now (None: leases rely on the TTL)."""
        return self.leases.key() if self.leases is not None else None

    def give_up(self, thread: int) -> None:
        """Give up the steps ``thread`` runs: its task passed its hard time limit (threads
        pool, docpipe.worker.thread_pool), where a prefork pool would kill the process."""
        self._lease_keeper.give_up(thread)

    def run_step(self, run_id: str, step: str, *, redelivery: int = 0) -> StepOutcome:
        """Run ``step`` of ``run_id`` if it is claimable; a done step is never run again.
        ``redelivery``: how many times this message was tried again already (the backoff of
        a PostgreSQL outage, when nothing could be recorded: the message is tried again)."""
        if self._lease_keeper.given_up(run_id, step):
            # A thread of this process still runs it after giving it up: not here, not now.
            return StepOutcome("busy", retry_in_s=self.settings.lease_ttl_s)
        try:
            return self._run_step(run_id, step)
        except psycopg.OperationalError as exc:
            delay = retry_delay(
                redelivery + 1,
                base_s=self.settings.retry_backoff_base_s,
                cap_s=self.settings.retry_backoff_cap_s,
            )
            log.warning(
                "database unavailable for %s/%s, retry in %.1fs: %s", run_id, step, delay, exc
            )
            return StepOutcome("retry", retry_in_s=delay, error=f"database unavailable: {exc}")

    def _run_step(self, run_id: str, step: str) -> StepOutcome:
        claim = runs.claim_step(
            self.db,
            run_id,
            step,
            owner=self.owner,
            lease_s=self.settings.lease_ttl_s,
            session=self.lease_session(),
        )
        if claim is None:
            return self._not_claimed(run_id, step)
        started = time.monotonic()
        outcome = replace(self._run_claimed(claim), lane=claim.lane)
        metrics.observe_step(
            claim.pipeline,
            step,
            claim.lane,
            outcome.kind,
            outcome.run_status,
            time.monotonic() - started,
        )
        return outcome

    def _run_claimed(self, claim: runs.Claim) -> StepOutcome:
        plan = self._plan(claim)
        if isinstance(plan, StepOutcome):
            return plan
        if claim.reusable_output is not None and claim.review_pauses and claim.step != EXTRACT_TEXT:
            # A person approved this output for the same input in an earlier run.
            return self._record(
                claim,
                plan.pipeline,
                claim.reusable_output,
                (),
                0,
                decision_id=claim.reusable_decision_id,
            )
        ctx = self._calls(claim, plan.spec)
        output: dict[str, Any] | None = None  # kept for the reviewer when it breaks its schema
        try:
            with self._lease_keeper.holding(claim, ctx):
                output = self._execute(claim, plan.spec, ctx)
                _check_output(output, plan.spec.output_schema)
        except psycopg.Error:
            raise  # PostgreSQL is unreachable: the message is tried again (run_step)
        except self._ends_step as exc:
            return self._endings.after_failure(claim, plan, exc, ctx.calls_sent, output)
        # The pipeline's rules may ask for a person: the run then pauses after this step.
        sample_at = sample_point(claim.document_sha256 or "", claim.pipeline, claim.step)
        share = self.settings.poor_extraction_share
        reasons = plan.pipeline.review_reasons(
            claim.step, output, sample_at=sample_at, poor_extraction_share=share
        )
        # An evaluation's run goes on: what its rules would have done is measured from its
        # outputs afterwards (docpipe.state.evaluation_report).
        return self._record(
            claim, plan.pipeline, output, reasons if claim.review_pauses else (), ctx.calls_sent
        )

    def _plan(self, claim: runs.Claim) -> StepPlan | StepOutcome:
        """What the claimed step runs; or, when it cannot run by itself (its definition
        changed, its attempts are used up), the run paused for a person."""
        pipeline = self.pipelines.by_key.get(claim.pipeline)
        if pipeline is None or claim.pipeline_hash not in (None, pipeline.definition_hash):
            # Refused at start-up while runs use it; a worker of another deploy may still
            # have taken the run. A human decides: retry it on this definition, or not.
            why = "is not loaded here" if pipeline is None else "changed since the run started"
            return self._endings.review(
                claim, ReviewReason.DEFINITION_CHANGED, f"pipeline {claim.pipeline} {why}"
            )
        spec = pipeline.step(claim.step)
        if claim.model_override is not None:  # a reviewer's retry named the model to ask
            spec = replace(spec, model=claim.model_override, fallback_model=None, candidates=())
        max_attempts = spec.max_attempts or self.settings.max_step_attempts
        if claim.attempt > max_attempts:
            return self._endings.review(
                claim,
                ReviewReason.ATTEMPTS_EXHAUSTED,
                f"gave up after {claim.attempt - 1} attempts",
            )
        if claim.step == EXTRACT_TEXT and (capped := _extraction_cap(claim, self.settings)):
            return self._endings.fail(claim, RunStatus.FAILED, str(capped))
        if claim.document is None:
            raise NotFoundError(f"run {claim.run_id} or its document does not exist")
        return StepPlan(pipeline, spec, max_attempts)

    def _calls(self, claim: runs.Claim, spec: Step) -> StepCalls:
        """The provider calls of the claimed step, under its lease and generation."""
        return StepCalls(
            db=self.db,
            llm=self.llm,
            settings=self.settings,
            step=spec,
            run_id=claim.run_id,
            tenant_id=claim.tenant_id,
            lane=claim.lane,
            attempt=claim.attempt,
            generation=claim.generation,
            gate=self.gate,
            pipeline=claim.pipeline,
            owner=self.owner,
            interruptions=self.interruptions,
        )

    def _record(
        self,
        claim: runs.Claim,
        pipeline: Pipeline,
        output: dict[str, Any],
        reasons: Sequence[Reason],
        calls_sent: int,
        *,
        decision_id: int | None = None,
    ) -> StepOutcome:
        spec = pipeline.step(claim.step)
        next_step = pipeline.next_step(claim.step)
        recorded = runs.record_step_result(
            self.db,
            claim,
            owner=self.owner,
            output=output,
            model=spec.model,
            prompt_version=spec.prompt_version,
            next_step=next_step,
            review=reasons,
            decision_id=decision_id,
        )
        if recorded is None:
            # The run ended while we worked (cancel, deadline) or our lease was taken over.
            log.warning(
                "result of %s/%s refused: the run ended or the lease was lost",
                claim.run_id,
                claim.step,
            )
            runs.abandon_step(self.db, claim.run_id, claim.step, owner=self.owner)
            return StepOutcome("stopped", calls_sent=calls_sent, error="lease or run lost")
        if reasons:
            log.warning(
                "run %s needs_review after %s: %s",
                claim.run_id,
                claim.step,
                "; ".join(r.message for r in reasons),
            )
        return StepOutcome(
            "completed",
            run_status=recorded.run_status,
            next_step=None if reasons else next_step,
            messages=recorded.messages,
            calls_sent=calls_sent,
        )

    def _execute(self, claim: runs.Claim, spec: Step, ctx: StepCalls) -> dict[str, Any]:
        if spec.name == EXTRACT_TEXT:
            # docpipe's own first step: it reads the file's bytes and its page memo, which
            # a pipeline's code never sees.
            return extract_document_text(self.db, self.settings, claim.tenant_id, claim.document_id)
        assert claim.document is not None
        return spec.execute(ctx.input(claim.document, claim.outputs, claim.page_starts))

    def _not_claimed(self, run_id: str, step: str) -> StepOutcome:
        state = runs.step_state(self.db, run_id, step, lease_s=self.settings.lease_ttl_s)
        if state is None:
            return StepOutcome("stopped", error="no such run or step")
        if state.status == StepStatus.DONE:
            return StepOutcome("already_done", run_status=state.run_status)
        active = state.run_status in ACTIVE_RUN_STATUSES
        if active and state.past_deadline:
            runs.expire_run(self.db, run_id)
            return StepOutcome("stopped", run_status=RunStatus.EXPIRED, error="deadline passed")
        if state.status == StepStatus.RUNNING and state.lease_live:
            # Another worker holds a live lease; look again once it could have expired.
            return StepOutcome(
                "busy", run_status=state.run_status, retry_in_s=self.settings.lease_ttl_s
            )
        if active and not state.admitted:
            # A message ahead of admission (duplicated or forged): admission sends the real one.
            return StepOutcome("stopped", run_status=state.run_status, error="not admitted")
        if active and state.status == StepStatus.PENDING and state.current:
            # Early (a clock ahead of PostgreSQL's, a duplicate of a waiting retry, start_at not
            # reached; or due since the claim looked): try again when it is due.
            return self._endings.wait_until_due(run_id, step, max(state.due_in_s, _RECHECK_S))
        return StepOutcome("stopped", run_status=state.run_status, error="not claimable")


def _extraction_cap(claim: runs.Claim, settings: Settings) -> UnreadableDocumentError | None:
    """too_slow when reading the document, which hands itself back with its attempt refunded
    while it makes progress, has had as many deliveries or as much time as it may."""
    deliveries, most = claim.deliveries, settings.max_extraction_deliveries
    if deliveries > most:
        return too_slow(
            f"reading the document took {deliveries - 1} deliveries of its step without "
            f"ending (at most {most}, DOCPIPE_MAX_EXTRACTION_DELIVERIES)"
        )
    if claim.worked_s >= settings.max_extraction_s:
        return too_slow(
            f"reading the document took {claim.worked_s:.0f} s of workers' time without ending "
            f"(at most {settings.max_extraction_s:g} s, DOCPIPE_MAX_EXTRACTION_S)"
        )
    return None


def _check_output(output: dict[str, Any], schema: Mapping[str, Any]) -> None:
    try:
        validate_json(output, schema)
    except jsonschema.ValidationError as exc:
        raise InvalidOutputError(f"step output breaks its schema: {exc.message}") from None
