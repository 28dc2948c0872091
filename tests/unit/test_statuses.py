"""Each status enum of docpipe.statuses allows exactly what its column's CHECK constraint in
schema.sql allows, so Python and the database cannot drift apart."""

from __future__ import annotations

import re
from enum import StrEnum
from importlib.resources import files

import pytest

from docpipe.settings.provider_specs import OutputMode
from docpipe.statuses import (
    ACTIVE_RUN_STATUSES,
    ENDED_RUN_STATUSES,
    BatchStatus,
    CallStatus,
    DecisionAction,
    DeliveryStatus,
    Lane,
    Priority,
    ReviewReason,
    RunStatus,
    StepStatus,
)

SCHEMA = files("docpipe.state").joinpath("sql/schema.sql").read_text(encoding="utf-8")


def check_constraint(table: str, column: str) -> set[str]:
    """The values that ``CHECK (<column> IN (...))`` of ``table`` allows."""
    body = re.search(rf"CREATE TABLE {table} \((.*?)\n\);", SCHEMA, re.DOTALL)
    assert body, f"schema.sql has no table {table}"
    check = re.search(rf"CHECK \({column} IN \(([^)]*)\)\)", body.group(1))
    assert check, f"{table}.{column} has no CHECK (... IN (...))"
    return set(re.findall(r"'([^']*)'", check.group(1)))


@pytest.mark.parametrize(
    ("enum", "table", "column"),
    [
        (RunStatus, "pipeline_run", "status"),
        (StepStatus, "pipeline_step_result", "status"),
        (Lane, "pipeline_run", "lane"),
        (BatchStatus, "batch", "status"),
        (CallStatus, "llm_call_log", "status"),
        (DeliveryStatus, "webhook_delivery", "status"),
        (Priority, "pipeline_run", "priority"),
        (OutputMode, "llm_call_log", "output_mode"),
        (ReviewReason, "pipeline_run", "review_reason"),
        (DecisionAction, "review_decision", "action"),
    ],
)
def test_an_enum_allows_what_its_check_constraint_allows(
    enum: type[StrEnum], table: str, column: str
) -> None:
    assert {member.value for member in enum} == check_constraint(table, column)


def test_a_run_is_either_active_or_ended() -> None:
    assert set(ACTIVE_RUN_STATUSES) | set(ENDED_RUN_STATUSES) == set(RunStatus)
    assert not set(ACTIVE_RUN_STATUSES) & set(ENDED_RUN_STATUSES)
