"""The batches the fake provider holds, and the life each one goes through, whichever
interface created it (OpenAI's files and batches, Anthropic's message batches)::

    validating -> failed
               -> in_progress -> finalizing -> completed
                              -> expired          (its completion window ended first)
                              -> cancelling -> cancelled

A batch's requests are processed one by one over its completion delay (request i of n at
``in_progress + delay * (i + 1) / n``) by a ticker (``tick``), a bounded number per tick so
that the event loop keeps answering; each processed request is logged (stats.RequestLog:
its custom_id) and billed at the batch discount when answered. Requests not processed when
the window ends, or when a cancel takes effect, end expired or cancelled, unbilled. An
ended OpenAI batch gets its output file (answers) and error file (everything else).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from docpipe_fake_llm.batch_faults import BatchFate, FateQueue
from docpipe_fake_llm.billing import Billing
from docpipe_fake_llm.stats import RequestLog

__all__ = [
    "ENDED",
    "Answer",
    "BatchLine",
    "BatchStore",
    "FakeBatch",
    "FakeFile",
    "StoreTimings",
]

ENDED = frozenset({"failed", "completed", "expired", "cancelled"})

# (chat body, answer fault) -> (HTTP status, response body): docpipe_fake_llm.answers behind
# the parsing of a request (app wiring).
Answer = Callable[[dict[str, Any], str | None], tuple[int, dict[str, Any]]]


@dataclass
class FakeFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int


@dataclass
class BatchLine:
    """One request of a batch: its body as an OpenAI chat request, and how it ended."""

    custom_id: str
    body: dict[str, Any]
    due_at: float = float("inf")
    # None while waiting; "succeeded", "errored", "expired" or "cancelled" once ended.
    outcome: str | None = None
    status_code: int | None = None
    response: dict[str, Any] | None = None
    fault: str | None = None  # an answer fault its batch's fate gave it ("malformed")
    error_status: int | None = None  # ... or the error status it answers


@dataclass
class FakeBatch:
    id: str
    api: str  # "openai" | "anthropic"
    lines: list[BatchLine]
    window_s: float
    created_at: float
    completion_window: str = "24h"
    endpoint: str = "/v1/chat/completions"
    input_file_id: str | None = None
    metadata: dict[str, str] | None = None
    status: str = "validating"
    errors: list[dict[str, Any]] = field(default_factory=list)
    fate: BatchFate | None = None
    times: dict[str, float] = field(default_factory=dict)  # status -> when it was entered
    output_file_id: str | None = None
    error_file_id: str | None = None
    cancel_requested_at: float | None = None

    def enter(self, status: str, now: float) -> None:
        self.status = status
        self.times[status] = now

    @property
    def expires_at(self) -> float:
        return self.created_at + self.window_s

    def counts(self) -> Counter[str]:
        return Counter(line.outcome or "processing" for line in self.lines)


@dataclass(frozen=True)
class StoreTimings:
    """How long each stage takes, in seconds (the window: the batch's own unless set)."""

    validation_s: float = 0.2
    completion_s: float = 5.0
    finalizing_s: float = 0.2
    cancelling_s: float = 0.5
    window_s: float | None = None


class BatchStore:
    """Files and batches in memory, advanced by ``tick``; one per provider, used from its
    event loop only."""

    def __init__(
        self,
        answer: Answer,
        billing: Billing,
        request_log: RequestLog,
        timings: Callable[[], StoreTimings],
    ) -> None:
        self._answer = answer
        self.billing = billing
        self._request_log = request_log
        self._timings = timings
        self.fates = FateQueue()
        self.files: dict[str, FakeFile] = {}
        self.batches: dict[str, FakeBatch] = {}
        # custom_id -> times processed (answered or errored): a request processed twice
        # would be paid twice.
        self.processed: Counter[str] = Counter()
        self.requests_received = 0

    # --- files ------------------------------------------------------------------------

    def add_file(self, filename: str, purpose: str, data: bytes) -> FakeFile:
        stored = FakeFile(
            f"file-{uuid.uuid4().hex[:24]}", filename, purpose, data, int(time.time())
        )
        self.files[stored.id] = stored
        return stored

    # --- batches ----------------------------------------------------------------------

    def create(
        self,
        api: str,
        lines: Sequence[BatchLine],
        *,
        window_s: float,
        errors: Sequence[dict[str, Any]] = (),
        **details: Any,
    ) -> FakeBatch:
        """A new batch in ``validating`` (``errors``: what validation found: it fails)."""
        prefix = "batch_" if api == "openai" else "msgbatch_"
        now = time.time()
        timings = self._timings()
        batch = FakeBatch(
            id=prefix + uuid.uuid4().hex[:24],
            api=api,
            lines=list(lines),
            window_s=timings.window_s if timings.window_s is not None else window_s,
            created_at=now,
            errors=list(errors),
            fate=self.fates.take(),
            **details,
        )
        batch.times["validating"] = now
        self.batches[batch.id] = batch
        self.requests_received += len(batch.lines)
        return batch

    def listed(self, api: str) -> list[FakeBatch]:
        """This interface's batches, newest first (as both providers list them)."""
        return [b for b in reversed(self.batches.values()) if b.api == api]

    def cancel(self, batch: FakeBatch) -> None:
        """Ask to cancel: requests not yet processed end cancelled a moment later."""
        if batch.status in ("validating", "in_progress", "finalizing"):
            now = time.time()
            batch.cancel_requested_at = now
            batch.enter("cancelling", now)

    def tick(self, now: float | None = None, budget: int = 200) -> int:
        """Advance every batch to ``now``, processing at most ``budget`` due requests;
        returns how many were processed."""
        now = time.time() if now is None else now
        timings = self._timings()
        processed = 0
        for batch in list(self.batches.values()):
            if batch.status in ENDED:
                continue
            processed += self._advance(batch, now, timings, budget - processed)
        return processed

    def _advance(self, batch: FakeBatch, now: float, timings: StoreTimings, budget: int) -> int:
        if batch.status == "validating" and now >= batch.created_at + timings.validation_s:
            self._validated(batch, now, timings)
        if batch.status == "cancelling":
            if now >= (batch.cancel_requested_at or now) + timings.cancelling_s:
                self._end(batch, "cancelled", now)
            return 0
        processed = 0
        if batch.status == "in_progress":
            for line in self._due(batch, now, budget):
                self._process(batch, line)
                processed += 1
            if all(line.outcome is not None for line in batch.lines):
                batch.enter("finalizing", now)
            elif now >= batch.expires_at:
                self._end(batch, "expired", now)
        if batch.status == "finalizing" and now >= batch.times["finalizing"] + timings.finalizing_s:
            self._end(batch, "completed", now)
        return processed

    def _validated(self, batch: FakeBatch, now: float, timings: StoreTimings) -> None:
        fate = batch.fate
        if batch.api == "anthropic" and fate is not None and fate.kind == "fail":
            # Anthropic validates at creation: a batch that fails later fails request by request.
            fate = batch.fate = BatchFate(fate.id, "errors", 0, requests=len(batch.lines))
        if batch.errors or (fate is not None and fate.kind == "fail"):
            if not batch.errors:
                batch.errors = [{"code": "injected_fault", "message": "validation failed"}]
            self._end(batch, "failed", now)
            return
        batch.enter("in_progress", now)
        n = len(batch.lines)
        delay = fate.delay_s if fate is not None and fate.kind == "slow" else timings.completion_s
        stall_after = round(fate.share * n) if fate is not None and fate.kind == "expire" else n
        affected = fate.requests if fate is not None else 0
        for i, line in enumerate(batch.lines):
            line.due_at = now + delay * (i + 1) / n if i < stall_after else float("inf")
            if fate is not None and i < affected and fate.kind == "errors":
                line.error_status = fate.status
            elif fate is not None and i < affected and fate.kind == "malformed":
                line.fault = "malformed"

    @staticmethod
    def _due(batch: FakeBatch, now: float, budget: int) -> Iterator[BatchLine]:
        for line in batch.lines:
            if budget <= 0 or line.due_at > now:
                return
            if line.outcome is None:
                budget -= 1
                yield line

    def _process(self, batch: FakeBatch, line: BatchLine) -> None:
        self._request_log.record(line.custom_id)
        self.processed[line.custom_id] += 1
        if line.error_status is not None:
            line.status_code, line.response = line.error_status, _error(line.error_status)
        else:
            line.status_code, line.response = self._answer(line.body, line.fault)
        if line.status_code == 200:
            line.outcome = "succeeded"
            usage = line.response["usage"]
            self.billing.bill(
                str(line.body.get("model")),
                int(usage["prompt_tokens"]),
                int(usage["completion_tokens"]),
                batch=True,
            )
        else:
            line.outcome = "errored"

    def _end(self, batch: FakeBatch, status: str, now: float) -> None:
        """``status`` (an ended one): unprocessed requests end with it; an OpenAI batch that
        ran gets its output and error files."""
        unprocessed = {"expired": "expired", "cancelled": "cancelled"}.get(status)
        for line in batch.lines:
            if line.outcome is None and unprocessed is not None:
                line.outcome = unprocessed
        batch.enter(status, now)
        if batch.api == "openai" and status != "failed":
            self._write_result_files(batch)

    def _write_result_files(self, batch: FakeBatch) -> None:
        answered = [_openai_line(line) for line in batch.lines if line.outcome == "succeeded"]
        others = [
            _openai_line(line)
            for line in batch.lines
            if line.outcome is not None and line.outcome != "succeeded"
        ]
        if answered:
            batch.output_file_id = self.add_file(
                f"{batch.id}_output.jsonl", "batch_output", _jsonl(answered)
            ).id
        if others:
            batch.error_file_id = self.add_file(
                f"{batch.id}_error.jsonl", "batch_output", _jsonl(others)
            ).id

    def stats(self) -> dict[str, Any]:
        by_status: Counter[str] = Counter(b.status for b in self.batches.values())
        outcomes: Counter[str] = Counter()
        for batch in self.batches.values():
            outcomes.update(line.outcome or "processing" for line in batch.lines)
        return {
            "batches": len(self.batches),
            "by_status": dict(by_status),
            "requests_received": self.requests_received,
            "requests_processed": sum(self.processed.values()),
            "requests_by_outcome": dict(outcomes),
            "processed_twice": sorted(c for c, n in self.processed.items() if n > 1),
            "billing": self.billing.as_dict(),
        }


_EXPIRED = "This request could not be executed before the completion window expired."
_CANCELLED = "This request was not executed because the batch was cancelled."


def _openai_line(line: BatchLine) -> dict[str, Any]:
    """A request as OpenAI's output or error file has it."""
    entry: dict[str, Any] = {
        "id": f"batch_req_{uuid.uuid4().hex[:24]}",
        "custom_id": line.custom_id,
    }
    if line.outcome in ("expired", "cancelled"):
        code = "batch_expired" if line.outcome == "expired" else "batch_cancelled"
        message = _EXPIRED if line.outcome == "expired" else _CANCELLED
        return {**entry, "response": None, "error": {"code": code, "message": message}}
    response = {
        "status_code": line.status_code,
        "request_id": f"req_{uuid.uuid4().hex[:24]}",
        "body": line.response,
    }
    return {**entry, "response": response, "error": None}


def _error(status: int) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        429: "rate_limit_error",
        503: "server_error",
    }.get(status, "server_error")
    return {
        "error": {"message": f"injected error {status}", "type": kind, "code": "injected_fault"}
    }


def _jsonl(entries: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in entries).encode()
