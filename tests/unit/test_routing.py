"""The router: which candidate model a call goes to, by priority and budget left."""

from __future__ import annotations

from decimal import Decimal

import pytest

from docpipe.providers.routing import Candidate, Route, RouteReason, choose_model
from docpipe.settings.provider_specs import SpeedTier
from docpipe.statuses import Lane, Priority

# The step's order: a balanced model first, a fast dear one, a slow cheap one.
BALANCED = Candidate("balanced", SpeedTier.STANDARD, Decimal("0.010"))
FAST = Candidate("fast", SpeedTier.FAST, Decimal("0.050"))
CHEAP = Candidate("cheap", SpeedTier.SLOW, Decimal("0.001"))
STEP = [BALANCED, FAST, CHEAP]


@pytest.mark.parametrize(
    ("priority", "budget", "expected"),
    [
        (Priority.URGENT, None, Route("fast", RouteReason.FASTEST)),
        (Priority.NORMAL, None, Route("balanced", RouteReason.PREFERRED)),
        (Priority.LOW, None, Route("cheap", RouteReason.CHEAPEST)),
        # The fastest costs more than is left: the next fastest that fits.
        (Priority.URGENT, Decimal("0.02"), Route("balanced", RouteReason.WITHIN_BUDGET)),
        (Priority.URGENT, Decimal("0.005"), Route("cheap", RouteReason.WITHIN_BUDGET)),
        (Priority.NORMAL, Decimal("0.005"), Route("cheap", RouteReason.WITHIN_BUDGET)),
        (Priority.URGENT, Decimal("0.05"), Route("fast", RouteReason.FASTEST)),
        # Nothing fits: no call, the run stops as budget_exceeded.
        (Priority.LOW, Decimal("0.0009"), None),
    ],
)
def test_priority_and_budget_choose_the_model(
    priority: Priority, budget: Decimal | None, expected: Route | None
) -> None:
    assert choose_model(STEP, priority, budget) == expected


def test_one_candidate_is_chosen_for_what_it_is_and_ties_keep_the_steps_order() -> None:
    assert choose_model([CHEAP], Priority.URGENT, None) == Route(
        "cheap", RouteReason.ONLY_CANDIDATE
    )
    twins = [
        Candidate("a", SpeedTier.STANDARD, Decimal(1)),
        Candidate("b", SpeedTier.STANDARD, Decimal(1)),
    ]
    assert {choose_model(twins, p, None).model for p in Priority} == {"a"}  # type: ignore[union-attr]


def test_a_runs_priority_defaults_to_its_lanes() -> None:
    assert Priority.default_for(Lane.INTERACTIVE) == Priority.NORMAL
    assert Priority.default_for(Lane.BATCH) == Priority.LOW
