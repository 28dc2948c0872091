"""``run_step``: execute one pipeline step at most once to completion, without any broker.

The Celery task is a thin shell around :meth:`StepExecutor.run_step`; tests call it
directly. The outcome says what should happen next (publish the next step, retry later,
nothing), and the state in PostgreSQL already reflects it when it returns.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Literal

import jsonschema
import psycopg

from docpipe.backoff import retry_delay
from docpipe.errors import (
    BudgetExceededError,
    InvalidOutputError,
    NotFoundError,
    PermanentLLMError,
    RunStoppedError,
    TransientLLMError,
    UnreadableDocumentError,
)
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
from docpipe.state.batches import stop_batch
from docpipe.state.db import Database
from docpipe.state.leases import LeaseSession
from docpipe.statuses import (
    ACTIVE_RUN_STATUSES,
    BatchStatus,
    ReviewReason,
    RunStatus,
    StepStatus,
)
from docpipe.worker.text_extraction import ExtractionContinues, extract_document_text

__all__ = ["StepExecutor", "StepOutcome", "worker_identity"]

log = logging.getLogger(__name__)

# The least wait before a step that was not due looks again (never a busy loop).
_RECHECK_S = 0.05

OutcomeKind = Literal["completed", "already_done", "busy", "stopped", "retry", "failed"]


@dataclass(frozen=True)
class StepOutcome:
    kind: OutcomeKind
    run_status: str | None = None
    next_step: str | None = None
    retry_in_s: float | None = None
    outbox_ids: tuple[int, ...] = ()
    calls_sent: int = 0
    error: str | None = None
    lane: str | None = None  # of the claimed run


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
        # This process' lease session: its leases end with it (None: with their TTL only).
        self.leases = leases

    def lease_session(self) -> int | None:
        """The key of this process' lease session now (None: leases rely on the TTL)."""
        return self.leases.key() if self.leases is not None else None

    def run_step(self, run_id: str, step: str) -> StepOutcome:
        """Run ``step`` of ``run_id`` if it is claimable; a done step is never run again."""
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
        metrics.observe_step(claim.pipeline, step, claim.lane, outcome.kind, outcome.run_status,
                             time.monotonic() - started)  # fmt: skip
        return outcome

    def _run_claimed(self, claim: runs.Claim) -> StepOutcome:
        run_id, step = claim.run_id, claim.step
        pipeline = self.pipelines.by_key.get(claim.pipeline)
        if pipeline is None or claim.pipeline_hash not in (None, pipeline.definition_hash):
            # Refused at start-up while runs use it; a worker of another deploy may still
            # have taken the run. A human decides: retry it on this definition, or not.
            why = "is not loaded here" if pipeline is None else "changed since the run started"
            return self._review(claim, ReviewReason.DEFINITION_CHANGED,
                                f"pipeline {claim.pipeline} {why}")  # fmt: skip
        spec = pipeline.step(step)
        if claim.model_override is not None:  # a reviewer's retry named the model to ask
            spec = replace(spec, model=claim.model_override, fallback_model=None, candidates=())
        if claim.attempt > (max_attempts := spec.max_attempts or self.settings.max_step_attempts):
            return self._review(claim, ReviewReason.ATTEMPTS_EXHAUSTED,
                                f"gave up after {claim.attempt - 1} attempts")  # fmt: skip
        if claim.document is None:
            raise NotFoundError(f"run {run_id} or its document does not exist")
        if claim.reusable_output is not None and step != EXTRACT_TEXT:
            # A person approved this output for the same input in an earlier run.
            return self._record(claim, pipeline, claim.reusable_output, (), 0,
                                decision_id=claim.reusable_decision_id)  # fmt: skip
        ctx = StepCalls(
            db=self.db,
            llm=self.llm,
            settings=self.settings,
            step=spec,
            run_id=run_id,
            tenant_id=claim.tenant_id,
            lane=claim.lane,
            attempt=claim.attempt,
            generation=claim.generation,
            gate=self.gate,
            pipeline=claim.pipeline,
            owner=self.owner,
        )
        output: dict[str, Any] | None = None  # kept for the reviewer when it breaks its schema
        try:
            with _LeaseKeeper(self, claim, ctx):
                output = self._execute(claim, spec, ctx)
                _check_output(output, spec.output_schema)
        except ExtractionContinues as exc:
            return self._continue_extraction(claim, str(exc))
        except UnreadableDocumentError as exc:
            return self._fail(claim, RunStatus.FAILED, str(exc))
        except TransientLLMError as exc:
            if exc.kind == "throttled" or not exc.counts_as_attempt:
                return self._wait_for_provider(claim, exc, ctx.calls_sent)
            return self._retry_or_give_up(
                claim, str(exc), exc.retry_after, ctx.calls_sent, max_attempts
            )
        except self.interruptions as exc:
            return self._retry_or_give_up(
                claim, f"interrupted: {exc!r}", None, ctx.calls_sent, max_attempts
            )
        except RunStoppedError:
            runs.abandon_step(self.db, run_id, step, owner=self.owner)
            return StepOutcome("stopped", calls_sent=ctx.calls_sent, error="run stopped")
        except BudgetExceededError as exc:
            return self._stop_for_budget(claim, exc, ctx.calls_sent)
        except InvalidOutputError as exc:
            return self._review(claim, ReviewReason.INVALID_OUTPUT, str(exc), ctx.calls_sent,
                                output=output)  # fmt: skip
        except PermanentLLMError as exc:
            return self._fail(claim, RunStatus.FAILED, str(exc), ctx.calls_sent)
        except psycopg.Error:
            raise  # PostgreSQL is unreachable: the task tries the message again
        except Exception as exc:
            # The step's own code failed (a pipeline author's bug or refusal): running it
            # again would fail the same way, so the run fails with what it said.
            log.exception("step %s/%s raised", run_id, step)
            error = f"step {step} raised {type(exc).__name__}: {exc}"
            return self._fail(claim, RunStatus.FAILED, error, ctx.calls_sent)
        # The pipeline's rules may ask for a person: the run then pauses after this step.
        sample_at = sample_point(claim.document_sha256 or "", claim.pipeline, step)
        reasons = pipeline.review_reasons(step, output, sample_at=sample_at)
        return self._record(claim, pipeline, output, reasons, ctx.calls_sent)

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
            log.warning("result of %s/%s refused: the run ended or the lease was lost",
                        claim.run_id, claim.step)  # fmt: skip
            runs.abandon_step(self.db, claim.run_id, claim.step, owner=self.owner)
            return StepOutcome("stopped", calls_sent=calls_sent, error="lease or run lost")
        if reasons:
            log.warning("run %s needs_review after %s: %s", claim.run_id, claim.step,
                        "; ".join(r.message for r in reasons))  # fmt: skip
        return StepOutcome(
            "completed",
            run_status=recorded.run_status,
            next_step=None if reasons else next_step,
            outbox_ids=tuple(recorded.outbox_ids),
            calls_sent=calls_sent,
        )

    def _execute(self, claim: runs.Claim, spec: Step, ctx: StepCalls) -> dict[str, Any]:
        if spec.name == EXTRACT_TEXT:
            # docpipe's own first step: it reads the file's bytes and its page memo, which
            # a pipeline's code never sees.
            return extract_document_text(self.db, self.settings, claim.tenant_id,
                                         claim.document_id)  # fmt: skip
        assert claim.document is not None
        return spec.execute(ctx.input(claim.document, claim.outputs, claim.page_starts))

    def _continue_extraction(self, claim: runs.Claim, progress: str) -> StepOutcome:
        """Pages were read and recorded, the task's time is up: the step goes on in its
        next delivery at once, without using up an attempt (it made progress)."""
        released = runs.release_step(
            self.db, claim.run_id, claim.step, owner=self.owner, retry_in_s=0.0,
            error=progress, refund_attempt=True,
        )  # fmt: skip
        if not released:
            return self._stopped(claim, 0)
        return StepOutcome("retry", retry_in_s=0.0, error=progress)

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
            return StepOutcome("busy", run_status=state.run_status)
        if active and not state.admitted:
            # A message ahead of admission (duplicated or forged): admission sends the real one.
            return StepOutcome("stopped", run_status=state.run_status, error="not admitted")
        if active and state.status == StepStatus.PENDING and state.current:
            # Early (a clock ahead of PostgreSQL's, a duplicate of a waiting retry, start_at not
            # reached; or due since the claim looked): try again when it is due.
            delay = max(state.due_in_s, _RECHECK_S)
            return StepOutcome("retry", run_status=state.run_status, retry_in_s=delay,
                               error="not due yet")  # fmt: skip
        return StepOutcome("stopped", run_status=state.run_status, error="not claimable")

    def _wait_for_provider(
        self, claim: runs.Claim, exc: TransientLLMError, calls_sent: int
    ) -> StepOutcome:
        """The step waited for the shared limiter too long, or the provider is down for
        everyone: hand it back without counting the attempt, so an outage delays runs
        instead of failing them."""
        delay = (exc.retry_after or 1.0) * random.uniform(1.0, 1.5)
        released = runs.release_step(
            self.db, claim.run_id, claim.step, owner=self.owner, retry_in_s=delay,
            error=str(exc), refund_attempt=True,
        )  # fmt: skip
        if not released:
            return self._stopped(claim, calls_sent)
        return StepOutcome("retry", retry_in_s=delay, calls_sent=calls_sent, error=str(exc))

    def _retry_or_give_up(
        self,
        claim: runs.Claim,
        error: str,
        retry_after: float | None,
        calls_sent: int,
        max_attempts: int,
    ) -> StepOutcome:
        if claim.attempt >= max_attempts:
            error = f"gave up after {claim.attempt} attempts: {error}"
            return self._review(claim, ReviewReason.ATTEMPTS_EXHAUSTED, error, calls_sent)
        delay = retry_delay(
            claim.attempt,
            base_s=self.settings.retry_backoff_base_s,
            cap_s=self.settings.retry_backoff_cap_s,
            retry_after_s=retry_after,
        )
        released = runs.release_step(
            self.db, claim.run_id, claim.step, owner=self.owner, retry_in_s=delay, error=error
        )
        if not released:
            return self._stopped(claim, calls_sent)
        log.info(
            "step %s/%s attempt %d: retry in %.2fs: %s",
            claim.run_id,
            claim.step,
            claim.attempt,
            delay,
            error,
        )
        return StepOutcome("retry", retry_in_s=delay, calls_sent=calls_sent, error=error)

    def _stopped(self, claim: runs.Claim, calls_sent: int) -> StepOutcome:
        """The step could not be handed back: its run ended meanwhile (the step is dropped
        with it) or another worker holds its lease (nothing to do)."""
        runs.abandon_step(self.db, claim.run_id, claim.step, owner=self.owner)
        return StepOutcome("stopped", calls_sent=calls_sent, error="run ended or lease lost")

    def _stop_for_budget(
        self, claim: runs.Claim, exc: BudgetExceededError, calls_sent: int
    ) -> StepOutcome:
        if exc.scope == "batch" and claim.batch_id is not None:
            stop_batch(self.db, claim.tenant_id, claim.batch_id, status=BatchStatus.BUDGET_EXCEEDED,
                       reason=str(exc))  # fmt: skip
            runs.abandon_step(self.db, claim.run_id, claim.step, owner=self.owner)
            log.warning("batch %s stopped: %s", claim.batch_id, exc)
            return StepOutcome("failed", run_status=RunStatus.BUDGET_EXCEEDED,
                               calls_sent=calls_sent, error=str(exc))  # fmt: skip
        return self._fail(claim, RunStatus.BUDGET_EXCEEDED, str(exc), calls_sent)

    def _fail(self, claim: runs.Claim, status: str, error: str, calls_sent: int = 0) -> StepOutcome:
        runs.fail_run(
            self.db, claim.run_id, claim.step, owner=self.owner, status=status, error=error
        )
        log.warning("run %s %s at %s: %s", claim.run_id, status, claim.step, error)
        return StepOutcome("failed", run_status=status, calls_sent=calls_sent, error=error)

    def _review(
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
        runs.fail_run(self.db, claim.run_id, claim.step, owner=self.owner,
                      status=RunStatus.NEEDS_REVIEW, error=error, review_reason=reason,
                      output=output, input_hash=claim.input_hash)  # fmt: skip
        log.warning("run %s needs_review at %s (%s): %s", claim.run_id, claim.step, reason, error)
        return StepOutcome("failed", run_status=RunStatus.NEEDS_REVIEW, calls_sent=calls_sent,
                           error=error)  # fmt: skip


def _check_output(output: dict[str, Any], schema: Mapping[str, Any]) -> None:
    try:
        validate_json(output, schema)
    except jsonschema.ValidationError as exc:
        raise InvalidOutputError(f"step output breaks its schema: {exc.message}") from None


class _LeaseKeeper:
    """Renews the step's lease from a background thread while the step runs.

    If the process dies its lease session ends with it and the step is handed to another
    worker at once; if it is cut off, the renewals stop reaching PostgreSQL, the lease
    expires after lease_ttl_s and the reaper hands the step on then. Recovery never waits
    for the broker.
    """

    def __init__(self, executor: StepExecutor, claim: runs.Claim, ctx: StepCalls) -> None:
        self._executor = executor
        self._claim = claim
        self._ctx = ctx
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="lease-keeper", daemon=True)

    def __enter__(self) -> _LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _renew(self) -> None:
        e = self._executor
        while not self._stop.wait(e.settings.heartbeat_interval_s):
            try:
                kept = runs.renew_lease(
                    e.db,
                    self._claim.run_id,
                    self._claim.step,
                    owner=e.owner,
                    lease_s=e.settings.lease_ttl_s,
                    session=e.lease_session(),
                )
            except Exception:  # a database blip: try again at the next beat
                log.exception(
                    "lease renewal failed for %s/%s", self._claim.run_id, self._claim.step
                )
                continue
            if not kept:
                # Another worker has the step now, or its run ended (cancelled): the calls
                # not yet sent must not go out.
                log.warning("lease of %s/%s lost", self._claim.run_id, self._claim.step)
                self._ctx.stop_sending()
                return
