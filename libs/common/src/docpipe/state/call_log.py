"""The provider call log: one row per call attempt, written before its request is sent and
completed after. A row with status 'ok' is also the memo that keeps a retried step from
paying for the same call twice."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from docpipe.state.db import Database

__all__ = ["CallCheck", "CallKey", "check_and_start_call", "finish_call", "start_call"]


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
    cost_usd: Decimal
    budget_usd: Decimal | None
    batch_cost_usd: Decimal | None
    batch_budget_usd: Decimal | None
    step_cost_usd: Decimal | None  # when the step has a budget of its own
    call_id: int | None


def check_and_start_call(
    db: Database, call: CallKey, *, owner: str | None, step_budget_usd: Decimal | None
) -> CallCheck | None:
    """The checks before a call and, if they pass, its row: one round trip. None when the
    run does not exist."""
    return db.one_as(CallCheck, "check_and_start_call", owner=owner,
                     step_budget_usd=step_budget_usd, **asdict(call))  # fmt: skip


def start_call(db: Database, call: CallKey) -> int:
    """Log a call (to a fallback model) before it is sent; returns its row id."""
    row = db.one("start_call", **asdict(call))
    assert row is not None, "an INSERT ... RETURNING returns its row"
    return int(row["id"])


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
    )
