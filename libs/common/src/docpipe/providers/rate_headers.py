"""What a provider says about its limits in response headers, parsed into numbers.

OpenAI's names, which vLLM, LiteLLM and most gateways copy (``x-ratelimit-limit-requests`` is
per minute, ``x-ratelimit-reset-*`` is the time until the limit is full again)::

    x-ratelimit-limit-requests: 500          x-ratelimit-limit-tokens: 200000
    x-ratelimit-remaining-requests: 499      x-ratelimit-remaining-tokens: 199200
    x-ratelimit-reset-requests: 120ms        x-ratelimit-reset-tokens: 1m30.5s
    retry-after-ms: 1500                     retry-after: 2   (or an HTTP date)
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

__all__ = ["parse_duration", "rate_limits", "retry_after"]

_FIELDS = {
    "limit_requests": "x-ratelimit-limit-requests",
    "limit_tokens": "x-ratelimit-limit-tokens",
    "remaining_requests": "x-ratelimit-remaining-requests",
    "remaining_tokens": "x-ratelimit-remaining-tokens",
}
_RESETS = {
    "reset_requests_s": "x-ratelimit-reset-requests",
    "reset_tokens_s": "x-ratelimit-reset-tokens",
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
# A header that claims more than this is a mistake, not a reason to stop for a day.
MAX_WAIT_S = 600.0


def parse_duration(text: str) -> float | None:
    """Seconds of ``"1m30.5s"``, ``"120ms"``, ``"6m0s"`` or ``"2"`` (plain seconds); None if
    unreadable."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def rate_limits(headers: Mapping[str, str]) -> dict[str, float]:
    """The rate-limit headers present (and readable) in ``headers``, by field name."""
    found: dict[str, float] = {}
    for name, header in _FIELDS.items():
        if (value := headers.get(header)) is not None:
            try:
                found[name] = max(0.0, float(value))
            except ValueError:
                continue
    for name, header in _RESETS.items():
        if (value := headers.get(header)) is not None and (s := parse_duration(value)) is not None:
            found[name] = min(s, MAX_WAIT_S)
    return found


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the provider asks us to wait: ``retry-after-ms`` first, then ``Retry-After``
    (seconds or an HTTP date; a date in the past means now)."""
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return min(MAX_WAIT_S, max(0.0, float(ms) / 1000))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return min(MAX_WAIT_S, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        return min(MAX_WAIT_S, max(0.0, parsedate_to_datetime(value).timestamp() - time.time()))
    except (TypeError, ValueError):
        return None
