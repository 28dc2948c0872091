"""How a step's provider calls end on record: each call's completion is written once, and
those that arrive together are written together (docpipe.state.call_log.finish_calls)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from docpipe.errors import LLMError
from docpipe.observability import metrics
from docpipe.providers.client import Completion
from docpipe.settings.provider_specs import ModelPrice
from docpipe.state import call_log
from docpipe.state.call_log import CallFinish
from docpipe.state.db import Database

__all__ = ["CallLabels", "CallRecord", "Completions"]

# How long the first answer of several on the wire waits for the others to write them all at
# once (their thread waits as long): a few milliseconds against calls of a second or so.
_GROUP_WAIT_S = 0.003


@dataclass
class _Pending:
    finish: CallFinish
    written: bool = False
    error: BaseException | None = None


class Completions:
    """Completions of a step's calls (of run ``run_id``), each written as it arrives; those
    that arrive while a write is on its way, or within a few milliseconds of each other while
    other requests of the step are still on the wire, go together in one write. A call's
    thread returns only once its completion is on record (the memo its step's next attempt
    reads)."""

    def __init__(self, db: Database, on_wire: Callable[[], int], *, run_id: str) -> None:
        self._db = db
        self._run_id = run_id
        self._on_wire = on_wire  # the step's requests not yet answered and recorded
        self._changed = threading.Condition()
        self._queued: list[_Pending] = []
        self._writing = False

    def record(self, finish: CallFinish) -> None:
        mine = _Pending(finish)
        with self._changed:
            self._queued.append(mine)
            self._changed.notify_all()  # a writer lingering for answers has one more
            self._changed.wait_for(lambda: mine.written or not self._writing)
            if not mine.written:  # nobody is writing: this thread writes what is queued
                self._writing = True
                # The round's other answers are often a moment behind (the same latency):
                # wait that moment for them, never longer, so that one write takes them all.
                self._changed.wait_for(
                    lambda: len(self._queued) >= self._on_wire(), timeout=_GROUP_WAIT_S
                )
                group, self._queued = self._queued, []
        if not mine.written:
            error: BaseException | None = None
            try:
                call_log.finish_calls(self._db, [p.finish for p in group], run_id=self._run_id)
            except BaseException as exc:
                error = exc
            with self._changed:
                for p in group:
                    p.written, p.error = True, error
                self._writing = False
                self._changed.notify_all()
        if mine.error is not None:
            raise mine.error


@dataclass(frozen=True)
class CallLabels:
    pipeline: str
    tenant: str
    lane: str
    model: str


@dataclass(frozen=True)
class CallRecord:
    """The llm_call_log row of one request, completed exactly once (and counted)."""

    completions: Completions
    id: int
    price: ModelPrice
    labels: CallLabels
    route_reason: str

    def finish(
        self,
        status: str,
        latency_s: float,
        completion: Completion | None = None,
        *,
        error: LLMError | None = None,
        response: dict[str, Any] | None = None,
    ) -> None:
        # Tokens of an invalid answer are paid for too: they count in the cost.
        cost = (
            self.price.cost(completion.input_tokens, completion.output_tokens)
            if completion is not None
            else Decimal(0)
        )
        http_status = completion.http_status if completion else None
        if error and error.http_status:
            http_status = error.http_status
        self.completions.record(
            CallFinish(
                id=self.id,
                status=status,
                http_status=http_status,
                error_kind=error.kind if error else None,
                error=str(error)[:2000] if error else None,
                input_tokens=completion.input_tokens if completion else None,
                output_tokens=completion.output_tokens if completion else None,
                cost_usd=cost,
                latency_ms=round(latency_s * 1000),
                response=response,
                route_reason=self.route_reason,
                finish_reason=completion.finish_reason if completion else None,
                usage_estimated=completion.usage_estimated if completion else False,
            )
        )
        metrics.observe_provider_call(
            pipeline=self.labels.pipeline,
            tenant=self.labels.tenant,
            lane=self.labels.lane,
            model=self.labels.model,
            outcome=status,
            http_status=http_status,
            error_kind=error.kind if error else None,
            latency_s=latency_s,
            cost_usd=cost,
        )
