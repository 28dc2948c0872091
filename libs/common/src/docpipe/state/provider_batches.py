"""The provider-batch lane's state: calls waiting for a provider batch, the provider batches
docpipe created, and the answers they brought back (issue 38).

A call of a run whose batch asked for the lane (pipeline_run.provider_batch) is written in
the call log as every call is, before anything leaves; then, instead of being sent, it
waits in ``provider_batch_call`` with its request's body, and its step parks in PostgreSQL
(docpipe.worker.step_endings). A call goes::

    waiting --pack--> packed --(its batch ends)--> answered | failed --(its step)--> applied

The collector packs waiting calls into a ``provider_batch`` whose row (state ``packing``)
is the intent, recorded before the input file is uploaded; the poller ends it with every
line's answer or error in one statement (:func:`end_batch`), and wakes the parked steps
(:func:`wake_steps`). The step then validates an answer as any other, writes its cost at
the batch price, and settles the wait (:func:`settle_wait`). A call whose batch failed is
ended in the call log as an error (nothing was paid) and sent again by its step, in the
next provider batch or in real time (DOCPIPE_PROVIDER_BATCH_FALLBACK).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from docpipe import json_codec
from docpipe.state.call_log import CallKey
from docpipe.state.db import Database

__all__ = [
    "DEADLINE_NEAR",
    "BatchLine",
    "OpenBatch",
    "PackedCall",
    "WaitingGroup",
    "abandoned_batches",
    "drop_waits_of_ended_runs",
    "end_batch",
    "fail_submission",
    "open_batches",
    "pack",
    "packed_calls",
    "record_file",
    "record_status",
    "record_submitted",
    "recorded_remote_ids",
    "settle_wait",
    "switch_waits_near_deadline",
    "wait_for_batch",
    "waiting_calls",
    "waiting_groups",
    "wake_steps",
]


def wait_for_batch(
    db: Database,
    call_id: int,
    call: CallKey,
    *,
    provider: str,
    body: Mapping[str, Any],
    reserved_usd: Decimal,
) -> None:
    """The call (its llm_call_log row ``call_id``) waits for a provider batch, with the
    request's ``body`` as it would be sent, holding ``reserved_usd`` of its budgets (its
    estimated cost at the batch price) until the wait is settled."""
    db.execute(
        "wait_for_provider_batch",
        call_id=call_id,
        run_id=call.run_id,
        step=call.step,
        generation=call.generation,
        call_key=call.call_key,
        tenant_id=call.tenant_id,
        provider=provider,
        model=call.model,
        body_z=zlib.compress(json_codec.dumps(dict(body))),
        reserved_usd=reserved_usd,
    )


def settle_wait(
    db: Database,
    call_id: int,
    *,
    cost_usd: Decimal | None = None,
    realtime_cost_usd: Decimal | None = None,
) -> None:
    """The step used the outcome of the call's wait (an answer, or a failure it acted on)."""
    db.execute(
        "settle_provider_batch_wait",
        call_id=call_id,
        cost_usd=cost_usd,
        realtime_cost_usd=realtime_cost_usd,
    )


@dataclass(frozen=True)
class WaitingGroup:
    """Calls waiting for one model of one provider."""

    provider: str
    model: str
    calls: int
    oldest_s: float


def waiting_groups(db: Database) -> list[WaitingGroup]:
    return db.all_as(WaitingGroup, "waiting_provider_batch_groups")


@dataclass(frozen=True)
class PackedCall:
    """A call as its provider batch's input file holds it."""

    call_id: int
    body: dict[str, Any]


def _calls(rows: Sequence[Mapping[str, Any]]) -> list[PackedCall]:
    return [
        PackedCall(int(r["call_id"]), dict(json.loads(zlib.decompress(r["body_z"])))) for r in rows
    ]


def waiting_calls(db: Database, provider: str, model: str, limit: int) -> list[PackedCall]:
    """The oldest calls waiting for ``model``, at most ``limit``."""
    return _calls(
        db.all("waiting_provider_batch_calls", provider=provider, model=model, limit=limit)
    )


def pack(db: Database, provider: str, model: str, call_ids: Sequence[int], size: int) -> int | None:
    """Record the intent of a provider batch of ``call_ids`` (those still waiting); its id,
    or None when none was waiting any more."""
    row = db.one(
        "pack_provider_batch",
        provider=provider,
        model=model,
        call_ids=list(call_ids),
        bytes=size,
    )
    return None if row is None else int(row["id"])


@dataclass(frozen=True)
class OpenBatch:
    """A provider batch not yet ended."""

    id: int
    provider: str
    model: str
    state: str
    remote_id: str | None
    input_file_id: str | None
    requests: int
    age_s: float


def open_batches(db: Database) -> list[OpenBatch]:
    return db.all_as(OpenBatch, "open_provider_batches")


def packed_calls(db: Database, provider_batch_id: int) -> list[PackedCall]:
    """The calls packed into a provider batch, in the order its input file holds them."""
    return _calls(db.all("packed_provider_batch_calls", id=provider_batch_id))


def record_file(db: Database, provider_batch_id: int, input_file_id: str) -> None:
    db.execute("record_provider_batch_file", id=provider_batch_id, input_file_id=input_file_id)


def record_submitted(
    db: Database,
    provider_batch_id: int,
    *,
    remote_id: str,
    input_file_id: str | None,
    status: str,
) -> None:
    db.execute(
        "record_provider_batch_submitted",
        id=provider_batch_id,
        remote_id=remote_id,
        input_file_id=input_file_id,
        provider_status=status,
    )


def recorded_remote_ids(db: Database, provider: str, remote_ids: Sequence[str]) -> set[str]:
    """Those of ``remote_ids`` that provider batches of docpipe's have on record."""
    rows = db.all("recorded_provider_batch_ids", provider=provider, remote_ids=list(remote_ids))
    return {str(r["remote_id"]) for r in rows}


def record_status(db: Database, provider_batch_id: int, status: str) -> None:
    db.execute("record_provider_batch_status", id=provider_batch_id, provider_status=status)


def fail_submission(db: Database, provider_batch_id: int, error: str) -> None:
    """The provider refused to create the batch: its calls fail (unpaid), to be sent again
    by their steps."""
    db.execute("fail_provider_batch_submission", id=provider_batch_id, error=error[:2000])


@dataclass(frozen=True)
class BatchLine:
    """What a provider batch's output or error file says of one call: its answer (the
    response body) or its error."""

    call_id: int
    answer: Mapping[str, Any] | None = None
    error_kind: str | None = None
    error: str | None = None
    # An answer's usage and its cost at the batch price (recorded here only for a run that
    # ended meanwhile; a run still going records its answers itself).
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: Decimal | None = None

    def as_row(self) -> dict[str, Any]:
        answer_z = None
        if self.answer is not None:
            packed = zlib.compress(json_codec.dumps(dict(self.answer)))
            answer_z = base64.b64encode(packed).decode("ascii")
        return {
            "call_id": self.call_id,
            "answer_z": answer_z,
            "error_kind": self.error_kind,
            "error": None if self.error is None else self.error[:2000],
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": None if self.cost_usd is None else str(self.cost_usd),
        }


def end_batch(
    db: Database,
    provider_batch_id: int,
    *,
    state: str,
    provider_status: str,
    lines: Sequence[BatchLine],
    output_file_id: str | None,
    error_file_id: str | None,
    error: str | None,
) -> tuple[int, int]:
    """End a provider batch with its lines applied to its calls, once (a second call finds
    it ended and changes nothing); (answered, failed)."""
    row = db.one(
        "end_provider_batch",
        id=provider_batch_id,
        state=state,
        provider_status=provider_status,
        output_file_id=output_file_id,
        error_file_id=error_file_id,
        error=error or f"the provider batch ended {provider_status} without this request",
        batch_error_kind=f"batch_{state}",
        lines=Jsonb([line.as_row() for line in lines]),
    )
    assert row is not None, "an aggregate returns its row"
    return int(row["answered"]), int(row["failed"])


def wake_steps(db: Database, limit: int) -> list[int]:
    """Make at most ``limit`` parked steps whose calls are all answered due now, oldest
    answers first; their outbox rows."""
    return [int(r["id"]) for r in db.all("wake_provider_batch_steps", limit=limit)]


def abandoned_batches(db: Database) -> list[tuple[int, str, str]]:
    """Provider batches running for runs that all ended: (id, provider, the provider's id)."""
    return [
        (int(r["id"]), str(r["provider"]), str(r["remote_id"]))
        for r in db.all("abandoned_provider_batches")
    ]


def drop_waits_of_ended_runs(db: Database) -> int:
    """End the calls still waiting to be packed whose runs ended (never sent, unpaid)."""
    return db.execute("drop_waits_of_ended_runs")


# The kind of a wait ended because its run's deadline came close: its call goes in real time.
DEADLINE_NEAR = "deadline_near"


def switch_waits_near_deadline(db: Database, margin_s: float) -> int:
    """End the waits (packed or not) of runs whose deadline is nearer than ``margin_s``, so
    their steps send the calls in real time; the calls switched."""
    return db.execute("switch_waits_near_deadline", margin_s=margin_s)
