"""The provider call log: one row per call attempt, written before its request is sent and
completed after. A row with status 'ok' is also the memo that keeps a retried step from
paying for the same call twice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from docpipe.state.db import Database

__all__ = [
    "CallCheck",
    "CallKey",
    "budget_left",
    "check_and_start_call",
    "finish_call",
    "route_call",
    "start_call",
]


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


def check_and_start_call(
    db: Database,
    call: CallKey,
    *,
    owner: str | None,
    request: Mapping[str, Any],
    estimated_cost_usd: Decimal,
    step_budget_usd: Decimal | None,
) -> CallCheck | None:
    """The checks before a call and, if they pass (the call's estimated cost within the
    budgets of the run, its batch and the step), its row recording ``request`` (see
    PlannedCall.log_params): one round trip. None when the run does not exist."""
    return db.one_as(
        CallCheck,
        "check_and_start_call",
        owner=owner,
        estimated_cost_usd=estimated_cost_usd,
        step_budget_usd=step_budget_usd,
        **asdict(call),
        **request,
    )


def start_call(db: Database, call: CallKey, *, request: Mapping[str, Any]) -> int:
    """Log a call (routed elsewhere, or to a fallback model) before it is sent; returns its
    row id."""
    row = db.one("start_call", **asdict(call), **request)
    assert row is not None, "an INSERT ... RETURNING returns its row"
    return int(row["id"])


def route_call(db: Database, call_id: int, *, model: str, request: Mapping[str, Any]) -> None:
    """Before it is sent, record that the call goes to ``model`` with ``request`` instead."""
    db.execute("route_call", id=call_id, model=model, **request)


def finish_call(
    db: Database,
    call_id: int,
    *,
    status: str,
    http_status: int | None,
    error_kind: str | None,
    error: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    cost_usd: Decimal,
    latency_ms: int,
    response: dict[str, Any] | None,
    route_reason: str | None = None,
    finish_reason: str | None = None,
    usage_estimated: bool = False,
) -> None:
    """Complete the call's row (once) and add its cost to the run and its batch."""
    db.execute(
        "finish_call",
        id=call_id,
        status=status,
        http_status=http_status,
        error_kind=error_kind,
        error=error,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost_usd,
        latency_ms=latency_ms,
        response=Jsonb(response) if response is not None else None,
        route_reason=route_reason,
        finish_reason=finish_reason,
        usage_estimated=usage_estimated,
    )
