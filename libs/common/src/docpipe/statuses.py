"""Every status docpipe stores, one ``StrEnum`` each, matching the CHECK constraints of
``state/sql/schema.sql`` (a test compares them).

Run:   queued -> running -> done | failed | needs_review | cancelled | expired | budget_exceeded
       needs_review -> (a reviewer) queued (approve, retry) | done | failed (reject)
Step:  pending -> running (leased) -> done | failed | cancelled
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "ENDED_RUN_STATUSES",
    "BatchStatus",
    "CallStatus",
    "DecisionAction",
    "DeliveryStatus",
    "Lane",
    "Priority",
    "ReviewReason",
    "RunStatus",
    "StepStatus",
]


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"  # a permanent error
    # Paused for a person (ReviewReason says why) until a decision (DecisionAction).
    NEEDS_REVIEW = "needs_review"
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


class ReviewReason(StrEnum):
    """What kind of reason paused a run for a person."""

    INVALID_OUTPUT = "invalid_output"  # the output stayed outside its schema
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"  # transient errors used up every attempt
    RULE = "rule"  # a rule of the pipeline asked for a person (docpipe.pipelines.review)
    DEFINITION_CHANGED = "definition_changed"  # the run's pipeline is not loaded as it began


class DecisionAction(StrEnum):
    """What a reviewer decided."""

    APPROVE = "approve"  # the output (as is, or edited) stands; the run goes on
    RETRY = "retry"  # run the step (or an earlier one) again
    REJECT = "reject"  # the run ends failed


class DeliveryStatus(StrEnum):
    """A completion webhook's delivery."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
