"""The provider call log: one row per call attempt, written before its request is sent and
completed after. A row with status 'ok' is also the memo that keeps a retried step from
paying for the same call twice.

A round of a step's calls sent together is written in one statement before any of them
leaves (``check_and_start_calls``); completions that arrive together are written in one
statement too (``finish_calls``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from docpipe.state.db import Database

__all__ = [
    "CallCheck",
    "CallFinish",
    "CallKey",
    "budget_left",
    "check_and_start_calls",
    "finish_calls",
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
    step_cost_usd: Decimal | None  # when the step has a budget of its own
    call_id: int | None


def budget_left(check: CallCheck, step_budget_usd: Decimal | None) -> tuple[Decimal | None, str]:
    """What the run, its batch and the step may still spend (None: no budget), and which
    budget binds ("run", "batch" or "step")."""
    left: list[tuple[Decimal, str]] = []
    if check.budget_usd is not None:
        left.append((check.budget_usd - check.cost_usd, "run"))
    if check.batch_budget_usd is not None and check.batch_cost_usd is not None:
        left.append((check.batch_budget_usd - check.batch_cost_usd, "batch"))
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
) -> list[CallCheck]:
    """The checks before a round of one step's calls and, for each call they let through
    (its estimated cost within the budgets of the run, its batch and the step), its row
    recording its request (see PlannedCall.log_params): one round trip for the round. One
    check per call, in order; none when the run does not exist."""
    first = calls[0]
    return db.all_as(
        CallCheck,
        "check_and_start_calls",
        run_id=first.run_id,
        step=first.step,
        generation=first.generation,
        step_attempt=first.step_attempt,
        tenant_id=first.tenant_id,
        prompt_version=first.prompt_version,
        owner=owner,
        step_budget_usd=step_budget_usd,
        # One JSON parameter for the round (Decimals as strings: JSON has no decimal type).
        calls=Jsonb(
            [
                _call_row(c, r, cost)
                for c, r, cost in zip(calls, requests, estimated_costs_usd, strict=True)
            ]
        ),
    )


def _call_row(call: CallKey, request: Mapping[str, Any], cost: Decimal) -> dict[str, Any]:
    row = {k: request[k] for k in _REQUEST_COLUMNS}
    return {"call_key": call.call_key, "model": call.model, "estimated_cost_usd": str(cost), **row}


def start_call(db: Database, call: CallKey, *, request: Mapping[str, Any]) -> int:
    """Log a call (routed elsewhere, or to a fallback model) before it is sent; returns its
    row id."""
    row = db.one("start_call", **asdict(call), **request)
    assert row is not None, "an INSERT ... RETURNING returns its row"
    return int(row["id"])


def route_call(db: Database, call_id: int, *, model: str, request: Mapping[str, Any]) -> None:
    """Before it is sent, record that the call goes to ``model`` with ``request`` instead."""
    db.execute("route_call", id=call_id, model=model, **request)


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


def finish_calls(db: Database, finished: Sequence[CallFinish]) -> None:
    """Complete the calls' rows (each once) and add their cost to their runs and batches,
    in one statement."""
    db.execute(
        "finish_calls",
        finished=Jsonb([{**asdict(f), "cost_usd": str(f.cost_usd)} for f in finished]),
    )
