"""The model a call goes to, chosen from its step's candidates by the run's priority and
the budget it has left. Pure: the caller supplies the estimates, nothing is read here.

- ``urgent``: the fastest candidate (speed tier) that the budget left can pay for;
- ``normal``: the step's own order (its first candidate is its author's choice);
- ``low``: the cheapest candidate by estimated cost.

When the budget left cannot pay for the preferred candidate's estimated cost, the next one
in that order that it can pay for is chosen (necessarily a cheaper one); when it can pay for
none, there is no route and the run stops as ``budget_exceeded`` before anything is sent.
Ties keep the step's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from docpipe.provider_specs import SpeedTier
from docpipe.statuses import Priority

__all__ = ["Candidate", "Route", "RouteReason", "choose_model", "step_candidates"]


class RouteReason(StrEnum):
    """Why a call went to its model: recorded on the call and counted per model."""

    ONLY_CANDIDATE = "only_candidate"
    PREFERRED = "preferred"  # normal priority: the step's first candidate
    FASTEST = "fastest"  # urgent priority
    CHEAPEST = "cheapest"  # low priority
    WITHIN_BUDGET = "within_budget"  # the preferred one would cost more than is left
    FALLBACK = "fallback"  # the routed model's answer stayed invalid


@dataclass(frozen=True)
class Candidate:
    model: str
    speed: SpeedTier
    estimated_cost: Decimal


@dataclass(frozen=True)
class Route:
    model: str
    reason: RouteReason


_FIRST_CHOICE = {
    Priority.URGENT: RouteReason.FASTEST,
    Priority.NORMAL: RouteReason.PREFERRED,
    Priority.LOW: RouteReason.CHEAPEST,
}


def choose_model(
    candidates: Sequence[Candidate], priority: Priority, budget_left: Decimal | None
) -> Route | None:
    """The candidate to call and why, or None when the budget left pays for none."""
    if not candidates:
        raise ValueError("a step has at least one candidate model")
    order = list(range(len(candidates)))
    if priority == Priority.URGENT:
        order.sort(key=lambda i: candidates[i].speed.rank)
    elif priority == Priority.LOW:
        order.sort(key=lambda i: candidates[i].estimated_cost)
    for rank, i in enumerate(order):
        if budget_left is None or candidates[i].estimated_cost <= budget_left:
            if rank > 0:
                reason = RouteReason.WITHIN_BUDGET
            elif len(candidates) == 1:
                reason = RouteReason.ONLY_CANDIDATE
            else:
                reason = _FIRST_CHOICE[priority]
            return Route(candidates[i].model, reason)
    return None


def step_candidates(model: str, candidates: Sequence[str]) -> tuple[str, ...]:
    """The models a step may be routed to: its candidates, or its one model."""
    return tuple(candidates) or (model,)
