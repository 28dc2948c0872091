"""The provider call log: one row per call attempt, written before its request is sent and
completed after. A row with status 'ok' is also the memo that keeps a retried step from
paying for the same call twice.

A round of a step's calls sent together is written in one statement before any of them
leaves (``check_and_start_calls``); completions that arrive together are written in one
statement too (``finish_calls``)."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from docpipe import json_codec
from docpipe.state.db import Database

__all__ = [
    "CallCheck",
    "CallFinish",
    "CallKey",
    "budget_left",
    "check_and_start_calls",
    "finish_calls",
    "remember_answer",
    "reuse_answer",
    "route_call",
    "start_call",
]


# What a call's row records of its request (PlannedCall.log_params' keys).
_REQUEST_COLUMNS = ("provider", "route_reason", "output_mode", "max_tokens", "temperature", "seed")


@dataclass(frozen=True)
class CallKey:
    """Which call a row records: memoised per (run, step, generation, call_key)."""

    run_id: str
    step: str
    generation: int
    call_key: str
    step_attempt: int
    tenant_id: str
    model: str
    prompt_version: str


@dataclass(frozen=True)
class CallCheck:
    """What a call may do, read just before it: its memo if any, the step's lease holder,
    the run's status and the spending of the run and its batch. ``call_id`` is the row
    written for the call when every check passed."""

    memo: dict[str, Any] | None
    lease_owner: str | None
    status: str
    priority: str
    cost_usd: Decimal
    budget_usd: Decimal | None
    batch_cost_usd: Decimal | None
    batch_budget_usd: Decimal | None
    step_cost_usd: Decimal | None  # when the step has a budget of its own (reserved included)
    call_id: int | None
    reuse_answers: bool = False  # the run reuses answers from the tenant's cache
    # What the run's and its batch's calls waiting for provider batches hold (at the batch
    # price), not spent yet: budgets count it beside what was.
    reserved_usd: Decimal = Decimal(0)
    batch_reserved_usd: Decimal = Decimal(0)
    # The provider-batch lane (docpipe.state.provider_batches): the run's choice, and the
    # call's last wait for a provider batch (None: never waited).
    provider_batch: bool = False
    # The run's deadline is nearer than the lane's margin: its new calls go in real time.
    deadline_near: bool = False
    batch_state: str | None = None
    batch_call_id: int | None = None  # that wait's llm_call_log row
    batch_model: str | None = None
    batch_answer: dict[str, Any] | None = None  # the provider's response body
    batch_error_kind: str | None = None
    batch_error: str | None = None
    batch_attempts: int = 0  # provider batches the call went to so far


def budget_left(check: CallCheck, step_budget_usd: Decimal | None) -> tuple[Decimal | None, str]:
    """What the run, its batch and the step may still spend (None: no budget), what their
    calls waiting for provider batches reserved counted as spent, and which budget binds
    ("run", "batch" or "step")."""
    left: list[tuple[Decimal, str]] = []
    if check.budget_usd is not None:
        left.append((check.budget_usd - check.cost_usd - check.reserved_usd, "run"))
    if check.batch_budget_usd is not None and check.batch_cost_usd is not None:
        spent = check.batch_cost_usd + check.batch_reserved_usd
        left.append((check.batch_budget_usd - spent, "batch"))
    if step_budget_usd is not None:
        left.append((step_budget_usd - (check.step_cost_usd or Decimal(0)), "step"))
    if not left:
        return None, "run"
    return min(left)


def check_and_start_calls(
    db: Database,
    calls: Sequence[CallKey],
    *,
    owner: str | None,
    requests: Sequence[Mapping[str, Any]],
    estimated_costs_usd: Sequence[Decimal],
    step_budget_usd: Decimal | None,
    batch_costs_usd: Sequence[Decimal] | None = None,
    deadline_margin_s: float = 0.0,
) -> list[CallCheck]:
    """The checks before a round of one step's calls and, for each call they let through
    (its estimated cost within the budgets of the run, its batch and the step), its row
    recording its request (see PlannedCall.log_params): one round trip for the round. One
    check per call, in order; none when the run does not exist. A run of the
    provider-batch lane is checked with ``batch_costs_usd`` (the estimates at the batch
    price; default: ``estimated_costs_usd``), beside what its waiting calls reserved; unless
    its deadline is nearer than ``deadline_margin_s`` (DOCPIPE_PROVIDER_BATCH_DEADLINE_MARGIN_S):
    then its calls go in real time, and are checked at the real-time price."""
    first = calls[0]
    rows = db.all(
        "check_and_start_calls",
        run_id=first.run_id,
        step=first.step,
        generation=first.generation,
        step_attempt=first.step_attempt,
        tenant_id=first.tenant_id,
        prompt_version=first.prompt_version,
        owner=owner,
        step_budget_usd=step_budget_usd,
        deadline_margin_s=deadline_margin_s,
        # One JSON parameter for the round (Decimals as strings: JSON has no decimal type).
        calls=Jsonb(
            [
                _call_row(c, r, cost, lane)
                for c, r, cost, lane in zip(
                    calls,
                    requests,
                    estimated_costs_usd,
                    batch_costs_usd or estimated_costs_usd,
                    strict=True,
                )
            ]
        ),
    )
    checks = []
    for row in rows:
        memo = _memo(row.pop("memo"), row.pop("memo_z"))
        answer = _memo(None, row.pop("batch_answer_z"))
        checks.append(CallCheck(**row, memo=memo, batch_answer=answer))
    return checks


def _memo(response: dict[str, Any] | None, compressed: bytes | None) -> dict[str, Any] | None:
    """A call's memoised answer: compressed (finish_calls), or as stored before that."""
    if compressed is not None:
        # The json module, as for a JSONB column: exact integers of any size.
        return dict(json.loads(zlib.decompress(compressed)))
    return response


def _compressed(response: Mapping[str, Any] | None) -> str | None:
    """An answer as finish_calls stores it: zlib-compressed JSON (a fields call's 300-byte
    answer takes 40 % less, a sections or summary call's 1 kB half), in base64 to travel
    inside the statement's JSON parameter. Stored bodies are a call log's largest part."""
    if response is None:
        return None
    return base64.b64encode(zlib.compress(json_codec.dumps(response))).decode("ascii")


def _call_row(
    call: CallKey, request: Mapping[str, Any], cost: Decimal, batch_cost: Decimal
) -> dict[str, Any]:
    row = {k: request[k] for k in _REQUEST_COLUMNS}
    costs = {"estimated_cost_usd": str(cost), "batch_cost_usd": str(batch_cost)}
    return {"call_key": call.call_key, "model": call.model, **costs, **row}


def start_call(db: Database, call: CallKey, *, request: Mapping[str, Any]) -> int:
    """Log a call (routed elsewhere, or to a fallback model) before it is sent; returns its
    row id."""
    row = db.one("start_call", **asdict(call), **request)
    assert row is not None, "an INSERT ... RETURNING returns its row"
    return int(row["id"])


def route_call(
    db: Database, call_id: int, *, run_id: str, model: str, request: Mapping[str, Any]
) -> None:
    """Before it is sent, record that the call (of ``run_id``) goes to ``model`` with
    ``request`` instead."""
    db.execute("route_call", id=call_id, run_id=run_id, model=model, **request)


@dataclass(frozen=True)
class CallFinish:
    """How a call ended: what its row records once the answer (or the error) is in."""

    id: int
    status: str
    http_status: int | None
    error_kind: str | None
    error: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: Decimal
    latency_ms: int
    response: dict[str, Any] | None
    route_reason: str | None = None
    finish_reason: str | None = None
    usage_estimated: bool = False


def finish_calls(db: Database, finished: Sequence[CallFinish], *, run_id: str) -> None:
    """Complete the calls' rows (each once; calls of ``run_id``) and add their cost to the
    run and its batch, in one statement."""
    rows = []
    for f in finished:
        row = {**asdict(f), "cost_usd": str(f.cost_usd)}
        row["response_z"] = _compressed(row.pop("response"))
        rows.append(row)
    db.execute("finish_calls", finished=Jsonb(rows), run_id=run_id)


def reuse_answer(
    db: Database, call_id: int, *, tenant_id: str, request_sha256: str
) -> dict[str, Any] | None:
    """Complete the unsent call ``call_id`` with the answer the tenant's reuse cache holds
    for the same request (reused_answer then names the call it came from; it costs
    nothing); None when there is none, and the call is sent as usual."""
    row = db.one("reuse_answer", id=call_id, tenant_id=tenant_id, request_sha256=request_sha256)
    return None if row is None else _memo(row["response"], row["response_z"])


def remember_answer(db: Database, *, tenant_id: str, request_sha256: str, call_id: int) -> None:
    """Put the answered call ``call_id`` of a run that reuses answers into the cache."""
    db.execute(
        "remember_answer", tenant_id=tenant_id, request_sha256=request_sha256, call_id=call_id
    )
