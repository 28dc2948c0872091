"""Provider calls made by a step: memoised, logged before they are sent, validated after.

:class:`StepCalls` holds what one claimed step needs to call models (the database, the
client, the limiter, its lease); the step's own code sees only :meth:`StepCalls.input`, a
:class:`~docpipe.pipelines.StepInput` with the document, the earlier outputs and ``ask``.
A call whose answer was already accepted for this run, step and generation returns the
stored answer without a request, so a step that is retried after a crash re-sends only the
calls that had not finished. A run that reuses answers (an evaluation's, or one that opted
in) also takes the answer the tenant's reuse cache holds for the very same request (model,
parameters, messages, schema: PlannedCall.request_sha256) from another such run, and puts
its own answers there; reused_answer names the call each reuse came from.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import partial
from types import MappingProxyType
from typing import Any, TypeVar

from docpipe.errors import (
    BudgetExceededError,
    InvalidOutputError,
    LLMError,
    PermanentLLMError,
    RunStoppedError,
    WaitingForProviderBatch,
)
from docpipe.interruptions import shielded, waking
from docpipe.observability import metrics
from docpipe.pipelines.model import Step, StepInput
from docpipe.providers.call_threads import call_threads
from docpipe.providers.client import ChatClient, read_completion
from docpipe.providers.completions import CallLabels, CallRecord, Completions
from docpipe.providers.limiter import CallGate, no_gate
from docpipe.providers.routing import (
    PlannedCall,
    RouteReason,
    candidates_of,
    choose_model,
    plan_call,
    read_answer,
    step_candidates,
)
from docpipe.settings import Settings
from docpipe.state import call_log, provider_batches
from docpipe.state.call_log import CallCheck, CallKey
from docpipe.state.db import Database
from docpipe.statuses import ACTIVE_RUN_STATUSES, Priority

__all__ = ["StepCalls", "call_request_id"]

_T = TypeVar("_T")

# A thread waiting for its round's answers wakes when they are in or when it is interrupted
# (docpipe.interruptions.waking); this bounds the wait all the same. (It woke every 0.25 s
# to let an interruption land: 2.5 ms of CPU per step, 13 %, for a threads worker of 200
# slots at 2 s per call.)
_ROUND_RECHECK_S = 5.0


@dataclass
class StepCalls:
    """The provider calls of one claimed step, and the bookkeeping that keeps them safe."""

    db: Database
    llm: ChatClient
    settings: Settings
    step: Step
    run_id: str
    tenant_id: str
    lane: str
    attempt: int
    generation: int
    gate: CallGate = no_gate
    pipeline: str = "unknown"  # the run's pipeline key, for metrics
    # The worker holding the step's lease; no call is sent once another worker took it over.
    owner: str | None = None
    # What interrupts the step from outside (Celery's soft time limit): raised by a call the
    # step's own thread runs, it ends the fan-out instead of being that call's error.
    interruptions: tuple[type[BaseException], ...] = ()
    calls_sent: int = field(default=0, init=False)
    # Requests on the wire, and whether new ones may still start (see stop_sending).
    _in_flight: int = field(default=0, init=False)
    _stopping: bool = field(default=False, init=False)
    # Slots the gate granted this round's calls at once, per model: (slot, estimated tokens).
    _reserved: dict[str, list[tuple[str, int]]] = field(default_factory=dict, init=False)
    _idle: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _completions: Completions = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._completions = Completions(self.db, lambda: self._in_flight, run_id=self.run_id)

    def input(
        self, document: str, outputs: Mapping[str, Any], page_starts: Sequence[int] = (0,)
    ) -> StepInput:
        """What the step's code gets: the document with its page map, earlier outputs,
        ``ask`` and ``ask_all``."""
        return _Input(self, document, tuple(page_starts), MappingProxyType(dict(outputs)))

    def ask_all(
        self,
        requests: Sequence[tuple[str, str, Mapping[str, Any]]],
        *,
        concurrency: int | None = None,
    ) -> list[dict[str, Any]]:
        """``ask`` for each (call_key, user, schema), at most ``concurrency`` (and never
        more than ``step_call_concurrency``) at once; answers in request order. Every call
        finishes (and is memoised) before the first error is raised, so a retry re-sends
        only what failed. More than DOCPIPE_MAX_FANOUT_CALLS requests fail the step before
        any is sent (each is a paid call), and the run goes to review."""
        if len(requests) > self.settings.max_fanout_calls:
            raise InvalidOutputError(
                f"step {self.step.name} fans out to {len(requests)} calls; the most one "
                f"fan-out may send is {self.settings.max_fanout_calls} (DOCPIPE_MAX_FANOUT_CALLS)",
                kind="fan_out_too_large",
            )
        parallel = min(
            concurrency or self.settings.step_call_concurrency,
            self.settings.step_call_concurrency,
            len(requests),
        )
        if parallel <= 1:
            return [self.ask(*r) for r in requests]
        # A round's first call runs on this thread, except in a process' main thread (a
        # prefork pool process): there the soft limit is a signal, which no shield holds
        # back, and it would cut that call between its answer and its record (paid twice).
        # A threads pool's interruption waits for the record (interruptions.shielded); its
        # hard limit's does not, as for a single ``ask``: that call is then abandoned.
        fan_out = _FanOut(inline_first=threading.current_thread() is not threading.main_thread())
        futures: list[Future[dict[str, Any]]] = []
        try:
            # Round by round: a round's rows are written in one statement before any of its
            # requests leaves (see _start_round), and its answers as they come.
            for first in range(0, len(requests), parallel):
                try:
                    round_futures = self._start_round(requests[first : first + parallel], fan_out)
                    fan_out.run_first(self.interruptions)
                    _wait_for_round(round_futures)
                finally:
                    self._unreserve_left()
                futures += round_futures
        except BaseException:
            # Interrupted from outside (soft time limit): nothing new of this step starts
            # (the call threads, shared with other steps, go on), and the step is handed on
            # only once its requests on the wire are answered and memoised; otherwise its
            # next attempt would pay for them a second time.
            fan_out.cancel()
            self.stop_sending(wait_s=self.settings.llm_timeout_s + 1)
            raise
        return [f.result() for f in futures]

    def stop_sending(self, *, wait_s: float = 0.0) -> None:
        """Let no further request start (a call the limiter lets through afterwards gives
        up), and wait up to ``wait_s`` for those already sent to be answered and recorded."""
        with self._idle:
            self._stopping = True
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=wait_s)

    def _request_starts(self) -> None:
        with self._idle:
            if self._stopping:
                raise RunStoppedError(f"{self.run_id}/{self.step.name} stopped sending")
            self._in_flight += 1
            self.calls_sent += 1

    def _request_ends(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def ask(self, call_key: str, user: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to ``user`` under the step's prompt, valid against ``schema``.

        Goes to the candidate model the router picks for the run's priority and budget, then
        to its fallback model if the answer stays invalid; raises InvalidOutputError when
        both fail, BudgetExceededError when the budget left pays for no candidate, or the
        provider's Transient/PermanentLLMError.
        """
        [answer] = self._start_round([(call_key, user, schema)], None)
        return answer.result()

    def _start_round(
        self,
        requests: Sequence[tuple[str, str, Mapping[str, Any]]],
        fan_out: _FanOut | None,
    ) -> list[Future[dict[str, Any]]]:
        """Check and log a round of calls in one statement, then send them (through
        ``fan_out``, else here); each future holds an answer as ``ask`` gives it."""
        if self.step.model is None:
            raise PermanentLLMError(f"step {self.step.name} names no model to ask", kind="no_model")
        if len({r[0] for r in requests}) < len(requests):  # a key twice: one row each, in turn
            return [f for r in requests for f in self._start_round([r], fan_out)]
        candidates = step_candidates(self.step.model, self.step.candidates)
        messages = [
            [{"role": "system", "content": self.step.system_prompt}, {"role": "user", "content": u}]
            for _, u, _ in requests
        ]
        # Each call's row names the step's first candidate, written with the checks; the
        # router may then move it to another model before anything is sent.
        first = [
            self._plan(candidates[0], m, r[2], _first_reason(candidates))
            for m, r in zip(messages, requests, strict=True)
        ]
        checks = call_log.check_and_start_calls(
            self.db,
            [self._call_key(r[0], f.model.name) for r, f in zip(requests, first, strict=True)],
            owner=self.owner,
            requests=[f.log_params() for f in first],
            estimated_costs_usd=[f.estimated_cost for f in first],
            step_budget_usd=self.step.budget_usd,
            batch_costs_usd=[f.batch_estimated_cost for f in first],
            deadline_margin_s=self.settings.provider_batch_deadline_margin_s,
        )
        if not checks:
            raise RunStoppedError(f"run {self.run_id} is no longer running")
        calls = [
            partial(self._ask_checked, r[0], m, r[2], candidates, f, c)
            for r, m, f, c in zip(requests, messages, first, checks, strict=True)
        ]
        if fan_out is None:
            return [_settled(call) for call in calls]
        self._reserve(
            first[0].model.name,
            [
                f.estimated_tokens
                for f, c in zip(first, checks, strict=True)
                if c.memo is None
                and c.call_id is not None
                and (not c.provider_batch or c.deadline_near)
            ],
        )
        # Each call runs in a copy of this context, so its trace span nests in the step's.
        return [fan_out.submit(_in_context_copy(call)) for call in calls]

    def _reserve(self, model: str, tokens: list[int]) -> None:
        """Ask the gate once for the slots of a round's calls to ``model`` (those to be sent
        under their first candidate), instead of once per call."""
        if len(tokens) > 1:
            slots = self.gate.reserve(model, self.lane, tokens)
            if slots:
                with self._idle:
                    self._reserved[model] = list(zip(slots, tokens, strict=True))

    def _take_reserved(self, model: str) -> str | None:
        with self._idle:
            reserved = self._reserved.get(model)
            return reserved.pop()[0] if reserved else None

    def _unreserve_left(self) -> None:
        """Give back the slots of a round that no call took (routed elsewhere, stopped)."""
        with self._idle:
            left, self._reserved = self._reserved, {}
        for model, slots in left.items():
            for slot, tokens in slots:
                self.gate.unreserve(model, slot, tokens)

    def _ask_checked(
        self,
        call_key: str,
        messages: list[dict[str, str]],
        schema: Mapping[str, Any],
        candidates: tuple[str, ...],
        first: PlannedCall,
        check: CallCheck,
    ) -> dict[str, Any]:
        """``ask`` once its checks are in: the memo, or the routed request and its fallback."""
        if check.status not in ACTIVE_RUN_STATUSES:
            raise RunStoppedError(f"run {self.run_id} is no longer running")
        if check.memo is not None:
            return dict(check.memo)
        if self.owner is not None and check.lease_owner != self.owner:
            raise RunStoppedError(f"the lease of {self.run_id}/{self.step.name} was taken over")
        if check.batch_state in ("waiting", "packed"):
            raise WaitingForProviderBatch(f"{call_key} waits for its provider batch")
        if check.batch_state == "answered":
            return self._answered_in_batch(call_key, messages, schema, check)
        routed = self._route(check, candidates, messages, schema)
        call_id: int | None = self._record_route(call_key, check, first, routed)
        if check.batch_state == "failed" and check.batch_call_id is not None:
            # Sent again, as this new row: by the next provider batch, or in real time.
            provider_batches.settle_wait(self.db, check.batch_call_id)
        if check.reuse_answers and call_id is not None:
            # The tenant has the answer to this very request: recorded as reused, not sent.
            reused = call_log.reuse_answer(
                self.db, call_id, tenant_id=self.tenant_id, request_sha256=routed.request_sha256
            )
            if reused is not None:
                return reused
        if check.provider_batch and call_id is not None and self._batch_may_take(routed, check):
            provider_batches.wait_for_batch(
                self.db,
                call_id,
                self._call_key(call_key, routed.model.name),
                provider=routed.model.provider.name,
                body=routed.request.body(),
                reserved_usd=routed.batch_estimated_cost,
            )
            raise WaitingForProviderBatch(f"{call_key} waits for a provider batch")
        invalid: list[str] = []
        for planned in [routed, *self._fallbacks(routed, messages, schema)]:
            try:
                return self._send(call_key, planned, schema, call_id, remember=check.reuse_answers)
            except InvalidOutputError as exc:
                invalid.append(f"{planned.model.name}: {exc}")
                call_id = None
        raise InvalidOutputError(f"{call_key}: no valid answer ({'; '.join(invalid)})")

    def _batch_may_take(self, routed: PlannedCall, check: CallCheck) -> bool:
        """Whether the call goes to a provider batch: its provider has a batch interface, and
        a call whose last provider batch failed may try another (a permanent error, or the
        attempts used up, and it goes in real time, where it is classified as today; so does
        a call whose run's deadline is close, or came close while it waited)."""
        return routed.model.provider.batch is not None and self._lane_open(check)

    def _lane_open(self, check: CallCheck) -> bool:
        """Whether the call of a provider-batch run may wait for a provider batch: always
        at first, and after a failed one as :meth:`_batch_may_take` says."""
        if not check.provider_batch or check.deadline_near:
            # Near its run's deadline, a call goes in real time at once: it would wait only
            # for the collector's next pass to switch it (switch_waits_near_deadline).
            return False
        if check.batch_state is None:
            return True
        return (
            self.settings.provider_batch_fallback == "next_batch"
            and check.batch_attempts < self.settings.provider_batch_max_attempts
            and check.batch_error_kind not in _PERMANENT_LINE_ERRORS
            and check.batch_error_kind != provider_batches.DEADLINE_NEAR
        )

    def _answered_in_batch(
        self,
        call_key: str,
        messages: list[dict[str, str]],
        schema: Mapping[str, Any],
        check: CallCheck,
    ) -> dict[str, Any]:
        """The answer a provider batch brought for the call, validated as every answer is
        and recorded at the batch price; an invalid one goes to the fallback models in real
        time, as a real-time answer would."""
        assert check.batch_call_id is not None and check.batch_model is not None
        planned = self._plan(check.batch_model, messages, schema, RouteReason.PREFERRED)
        interface = planned.model.provider.batch
        price = interface.price(planned.model.price) if interface else planned.model.price
        labels = CallLabels(self.pipeline, self.tenant_id, self.lane, planned.model.name)
        call = CallRecord(
            self._completions, check.batch_call_id, price, labels, planned.route_reason
        )
        answered: dict[str, Any] | None = None
        cost: Decimal | None = None
        invalid: list[str] = []
        try:
            completion = read_completion(check.batch_answer, planned.request)
            cost = price.cost(completion.input_tokens, completion.output_tokens)
            try:
                answered = read_answer(completion, schema, planned)
            except InvalidOutputError as exc:
                call.finish("invalid_output", 0.0, completion, error=exc)
                invalid.append(f"{planned.model.name}: {exc}")
            else:
                call.finish("ok", 0.0, completion, response=answered)
        except LLMError as exc:  # an answer that is no completion, or withheld
            call.finish("error", 0.0, error=exc)
            provider_batches.settle_wait(self.db, check.batch_call_id)
            raise
        realtime = planned.model.price.cost(completion.input_tokens, completion.output_tokens)
        metrics.count_provider_batch_saving(
            pipeline=self.pipeline,
            tenant=self.tenant_id,
            model=planned.model.name,
            saved_usd=realtime - (cost or Decimal(0)),
        )
        provider_batches.settle_wait(
            self.db, check.batch_call_id, cost_usd=cost, realtime_cost_usd=realtime
        )
        if answered is not None:
            return answered
        for fallback in self._fallbacks(planned, messages, schema):
            try:
                return self._send(call_key, fallback, schema)
            except InvalidOutputError as exc:
                invalid.append(f"{fallback.model.name}: {exc}")
        raise InvalidOutputError(f"{call_key}: no valid answer ({'; '.join(invalid)})")

    def _plan(
        self, model: str, messages: list[dict[str, str]], schema: Mapping[str, Any], reason: str
    ) -> PlannedCall:
        return plan_call(
            self.settings.provider_table.model(model),
            messages,
            schema,
            step=self.step.name,
            max_tokens=self.step.max_tokens or self.settings.default_max_tokens,
            reason=reason,
        )

    def _route(
        self,
        check: CallCheck,
        candidates: tuple[str, ...],
        messages: list[dict[str, str]],
        schema: Mapping[str, Any],
    ) -> PlannedCall:
        """The candidate the run's priority and budget left choose, or BudgetExceededError
        before anything is sent when the budget left pays for none."""
        left, scope = call_log.budget_left(check, self.step.budget_usd)
        asked = self.step.max_tokens or self.settings.default_max_tokens
        # A call that will wait for a provider batch is routed at the batch price.
        options = candidates_of(
            self.settings.provider_table,
            candidates,
            messages,
            asked,
            batch=self._lane_open(check),
        )
        route = choose_model(options, Priority(check.priority), left)
        if route is None:
            cheapest = min(options, key=lambda c: c.estimated_cost)
            raise BudgetExceededError(
                f"{scope} budget: ${left} left cannot pay for {cheapest.model} "
                f"(~${cheapest.estimated_cost} estimated for this call)",
                scope=scope,
            )
        metrics.count_model_choice(route.model, route.reason)
        return self._plan(route.model, messages, schema, route.reason)

    def _record_route(
        self, call_key: str, check: CallCheck, first: PlannedCall, routed: PlannedCall
    ) -> int:
        """The call's row, saying where it goes and why, written before it is sent."""
        if check.call_id is None:  # the first candidate did not fit the budget
            return call_log.start_call(
                self.db, self._call_key(call_key, routed.model.name), request=routed.log_params()
            )
        if routed.model.name != first.model.name:  # (the reason is recorded when it ends)
            call_log.route_call(
                self.db,
                check.call_id,
                run_id=self.run_id,
                model=routed.model.name,
                request=routed.log_params(),
            )
        return check.call_id

    def _fallbacks(
        self, routed: PlannedCall, messages: list[dict[str, str]], schema: Mapping[str, Any]
    ) -> list[PlannedCall]:
        """The safety net after an invalid answer: the step's fallback model, else the
        routed model's own (which may live on another provider)."""
        fallback = self.step.fallback_model or routed.model.fallback
        if fallback is None or fallback == routed.model.name:
            return []
        return [self._plan(fallback, messages, schema, RouteReason.FALLBACK)]

    def _call_key(self, call_key: str, model: str) -> CallKey:
        """What the call's llm_call_log row records it as."""
        return CallKey(
            run_id=self.run_id,
            step=self.step.name,
            generation=self.generation,
            call_key=call_key,
            step_attempt=self.attempt,
            tenant_id=self.tenant_id,
            model=model,
            prompt_version=self.step.prompt_version,
        )

    def _send(
        self,
        call_key: str,
        planned: PlannedCall,
        schema: Mapping[str, Any],
        call_id: int | None = None,
        *,
        remember: bool = False,
    ) -> dict[str, Any]:
        """One request, logged before it is sent (as ``call_id``, or now) and after; with
        ``remember``, its answer goes into the tenant's reuse cache."""
        model = planned.model.name
        if call_id is None:
            call_id = call_log.start_call(
                self.db, self._call_key(call_key, model), request=planned.log_params()
            )
        labels = CallLabels(self.pipeline, self.tenant_id, self.lane, model)
        call = CallRecord(
            self._completions, call_id, planned.model.price, labels, planned.route_reason
        )
        started = time.monotonic()
        with ExitStack() as paid:
            try:
                reserved = self._take_reserved(model)
                with self.gate.slot(model, self.lane, planned.estimated_tokens, reserved) as ticket:
                    self._request_starts()
                    # From here until its answer is on record the call is paid for: a time
                    # limit's interruption waits for that (the request ends by llm_timeout_s).
                    paid.enter_context(shielded())
                    try:
                        completion = ticket.completion = self.llm.chat(
                            replace(planned.request, request_id=call_request_id(call_id))
                        )
                    except BaseException:
                        self._request_ends()  # a failed call is no memo: nothing to wait for
                        raise
            except RunStoppedError as exc:  # never sent: logged as such, costs nothing
                call.finish("error", 0.0, error=LLMError(str(exc), kind="not_sent"))
                raise
            except LLMError as exc:
                call.finish("error", time.monotonic() - started, error=exc)
                raise
            # In flight until its answer is stored: that row is the memo the next attempt reads.
            try:
                output = read_answer(completion, schema, planned)
            except InvalidOutputError as exc:
                call.finish("invalid_output", completion.latency_s, completion, error=exc)
                raise
            else:
                call.finish("ok", completion.latency_s, completion, response=output)
            finally:
                self._request_ends()
            if remember:  # still shielded: a paid answer is shared even when interrupted
                call_log.remember_answer(
                    self.db,
                    tenant_id=self.tenant_id,
                    request_sha256=planned.request_sha256,
                    call_id=call_id,
                )
        return output


# Errors of a provider batch's line that another batch would answer the same way: the call
# goes in real time, where the error is classified as every call's is.
_PERMANENT_LINE_ERRORS = frozenset({"bad_request", "auth", "not_found", "too_large"})


def _first_reason(candidates: tuple[str, ...]) -> str:
    """What routing says about the first candidate when the budget allows it at normal
    priority (the row is corrected before sending when routing says otherwise)."""
    return RouteReason.ONLY_CANDIDATE if len(candidates) == 1 else RouteReason.PREFERRED


def call_request_id(call_id: int) -> str:
    """The request id a call is sent with: its llm_call_log row, readable at the provider."""
    return f"docpipe-call-{call_id}"


class _Input:
    """A step's view of its run (docpipe.pipelines.StepInput), and nothing else of it."""

    __slots__ = ("_calls", "document", "outputs", "page_starts")

    def __init__(
        self,
        calls: StepCalls,
        document: str,
        page_starts: tuple[int, ...],
        outputs: Mapping[str, Any],
    ) -> None:
        self._calls = calls
        self.document = document
        self.page_starts = page_starts
        self.outputs = outputs

    def ask(self, call_key: str, user: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return self._calls.ask(call_key, user, schema)

    def ask_all(
        self,
        requests: Sequence[tuple[str, str, Mapping[str, Any]]],
        *,
        concurrency: int | None = None,
    ) -> list[dict[str, Any]]:
        return self._calls.ask_all(requests, concurrency=concurrency)


def _in_context_copy(call: Callable[[], _T]) -> Callable[[], _T]:
    """``call`` to run in another thread with a copy of this thread's context variables."""
    context = contextvars.copy_context()
    return lambda: context.run(call)


class _FanOut:
    """Where the calls of a step's rounds run: the first of each round on the step's own
    thread, which would only wait for the answers otherwise, the others in the process'
    shared call threads (docpipe.providers.call_threads)."""

    def __init__(self, *, inline_first: bool) -> None:
        self._inline_first = inline_first
        self._first: tuple[Callable[[], Any], Future[Any]] | None = None
        self._sent: list[Future[Any]] = []

    def submit(self, call: Callable[[], _T]) -> Future[_T]:
        future: Future[_T]
        if self._inline_first and self._first is None:
            future = Future()
            self._first = (call, future)  # run by run_first, once the round is out
        else:
            future = call_threads().submit(call)
            self._sent.append(future)
        return future

    def run_first(self, interruptions: tuple[type[BaseException], ...]) -> None:
        """Run the round's first call here. Its error is its answer, as a call thread's
        would be; an interruption of the step (or a BaseException) is raised."""
        first, self._first = self._first, None
        if first is None:
            return
        call, future = first
        future.set_running_or_notify_cancel()
        try:
            future.set_result(call())
        except interruptions:
            raise
        except Exception as exc:  # the caller's .result() raises it
            future.set_exception(exc)

    def cancel(self) -> None:
        """Drop the calls that no thread has taken yet (the step's only)."""
        self._first = None
        for future in self._sent:
            future.cancel()


def _settled(call: Callable[[], _T]) -> Future[_T]:
    """``call`` run here, its answer or its error in a future (as a pool's would hold it)."""
    future: Future[_T] = Future()
    try:
        future.set_result(call())
    except BaseException as exc:  # the caller's .result() raises it
        future.set_exception(exc)
    return future


def _wait_for_round(futures: Sequence[Future[Any]]) -> None:
    """Return once every future of a round is done; an interruption of this thread (a
    threads pool's time limit) is raised at once, while the round is still on the wire."""
    answered = threading.Event()
    for future in futures:
        future.add_done_callback(lambda _: answered.set())
    with waking(answered):
        while True:
            # Cleared before the futures are looked at: a call answered after the look sets
            # it again, one answered before is seen by the look.
            answered.clear()
            if all(f.done() for f in futures):
                return
            answered.wait(_ROUND_RECHECK_S)
