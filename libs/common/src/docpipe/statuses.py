"""Every status docpipe stores, one ``StrEnum`` each, matching the CHECK constraints of
``state/sql/schema.sql`` (a test compares them).

Run:   queued -> running -> done | failed | needs_review | cancelled | expired | budget_exceeded
Step:  pending -> running (leased) -> done | failed | cancelled
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "ENDED_RUN_STATUSES",
    "BatchStatus",
    "CallStatus",
    "DeliveryStatus",
    "Lane",
    "Priority",
    "RunStatus",
    "StepStatus",
]


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"  # a permanent error
    NEEDS_REVIEW = "needs_review"  # retries exhausted, or output still invalid
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # its deadline passed
    BUDGET_EXCEEDED = "budget_exceeded"


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
ENDED_RUN_STATUSES = tuple(s for s in RunStatus if s not in ACTIVE_RUN_STATUSES)


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"  # leased to one worker
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Lane(StrEnum):
    """Interactive runs go straight to their queue; batch runs wait for admission."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


class Priority(StrEnum):
    """How a run's calls choose among a step's candidate models (docpipe.providers.routing)."""

    URGENT = "urgent"  # the fastest the budget can pay for
    NORMAL = "normal"  # the step's own order
    LOW = "low"  # the cheapest

    @classmethod
    def default_for(cls, lane: str) -> Priority:
        """A run's priority when its request names none: its lane says how it waits."""
        return cls.LOW if lane == Lane.BATCH else cls.NORMAL


class BatchStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    BUDGET_EXCEEDED = "budget_exceeded"


class CallStatus(StrEnum):
    """A provider call: logged as sent before its request leaves, then completed."""

    SENT = "sent"
    OK = "ok"
    INVALID_OUTPUT = "invalid_output"
    ERROR = "error"


class DeliveryStatus(StrEnum):
    """A completion webhook's delivery."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
