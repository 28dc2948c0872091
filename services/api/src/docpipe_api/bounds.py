"""How much and how far ahead a request may ask for: a run's budget, deadline and start.

Each is checked against its setting with a 422 that names the setting; what the request
leaves out gets the operator's default, never "unbounded".
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from docpipe.errors import InvalidRequestError
from docpipe.settings import Settings

__all__ = ["checked_deadline", "checked_start_at", "run_budget"]


def run_budget(asked: Decimal | None, settings: Settings, *, field: str) -> Decimal | None:
    """The budget a run gets: ``asked`` within DOCPIPE_MAX_RUN_BUDGET_USD, or the default
    (None only when the default is 0)."""
    if asked is None:
        return settings.default_run_budget_usd or None
    if asked > settings.max_run_budget_usd:
        raise InvalidRequestError(
            f"{field}={asked.normalize():f} is more than a run may cost: the limit is "
            f"{settings.max_run_budget_usd} (DOCPIPE_MAX_RUN_BUDGET_USD)"
        )
    return asked


def checked_deadline(
    deadline_s: float | None, now: datetime, settings: Settings
) -> datetime | None:
    """When the run must end, ``deadline_s`` from now, at most DOCPIPE_MAX_DEADLINE_S."""
    if deadline_s is None:
        return None
    if deadline_s > settings.max_deadline_s:
        raise InvalidRequestError(
            f"deadline_s={deadline_s:g} is beyond the limit of {settings.max_deadline_s:g} s "
            f"({_days(settings.max_deadline_s)}, DOCPIPE_MAX_DEADLINE_S)"
        )
    return now + timedelta(seconds=deadline_s)


def checked_start_at(start_at: datetime | None, now: datetime, settings: Settings) -> None:
    """422 unless ``start_at`` is at most DOCPIPE_MAX_START_DELAY_S ahead of ``now``."""
    if start_at is not None and start_at > now + timedelta(seconds=settings.max_start_delay_s):
        raise InvalidRequestError(
            f"start_at {start_at.isoformat()} is too far ahead: at most "
            f"{settings.max_start_delay_s:g} s ({_days(settings.max_start_delay_s)}, "
            f"DOCPIPE_MAX_START_DELAY_S) from now"
        )


def _days(seconds: float) -> str:
    return f"{seconds / 86_400:g} days"
