"""What a request may ask for: how often (requests per minute, per client address and per API
key), how much and how far ahead (a run's budget, deadline and start) and where to (the
``callback_url`` of a run or batch).

Each is checked against its setting with an error that names the setting; what the request
leaves out gets the operator's default, never "unbounded".

Rate: a fixed one-minute window counted in Redis, shared by every API replica, one atomic
MULTI (INCR + EXPIRE) per request and limit; the counter expires by itself. A fixed window
lets a client send up to twice its limit across a window boundary; that is the price of one
round trip and no clock-sensitive arithmetic, and fine for a guard against runaway clients
(the provider's own limit is enforced by docpipe.providers.limiter).

Callback URL: the cheap checks happen here, so a tenant hears of a mistake at once: webhooks
must be turned on and the tenant must have a signing secret (made with ``POST
/webhook-secret``, so its receiver can verify what it gets), or the request contradicts the
deployment's or the tenant's state (409); the URL must be http(s) without credentials and not
name a forbidden address literally, or the policy refuses it (403). The URL's form itself is
the OpenAPI document's (422 otherwise). The delivery checks the destination again after
resolving it (docpipe.worker.webhook_request): that is the guard.
"""

from __future__ import annotations

import logging
import math
import re
import time
from datetime import datetime, timedelta
from decimal import Decimal

import redis
from fastapi import HTTPException
from pydantic import HttpUrl

from docpipe.destinations import DestinationPolicy, DestinationRefused
from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.webhook_secrets import has_current_secret

__all__ = [
    "WINDOW_S",
    "accepted_callback_url",
    "check_batch_documents",
    "checked_deadline",
    "checked_start_at",
    "enforce_rate_limit",
    "run_budget",
]

log = logging.getLogger(__name__)

WINDOW_S = 60
# A JSON string, escapes included (what may hold a brace that opens no object), or a brace.
_STRING_OR_BRACE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|\{')
_BRACE = ord("{")
_COUNT_SLICE = 1024 * 1024


def enforce_rate_limit(client: redis.Redis, subject: str, limit: int, *, who: str) -> None:
    """Count one request of ``subject`` ("key:<id>", "ip:<address>"); 429 with Retry-After
    once this window's count exceeds ``limit``, saying ``who`` sent too many. Redis being
    down lets the request through (and says so in the log): the limit protects the service,
    it must not take it down."""
    now = time.time()
    window = int(now // WINDOW_S)
    counter = f"docpipe:api-rate:{subject}:{window}"
    try:
        with client.pipeline(transaction=True) as pipe:
            pipe.incr(counter)
            pipe.expire(counter, 2 * WINDOW_S)
            count, _ = pipe.execute()
    except redis.RedisError as exc:
        log.warning("rate limit not checked for %s: %s", subject, type(exc).__name__)
        return
    if int(count) > limit:
        retry_after = max(1, math.ceil((window + 1) * WINDOW_S - now))
        raise HTTPException(
            429,
            f"{who} made more than {limit} requests this minute; retry in {retry_after} s",
            headers={"Retry-After": str(retry_after)},
        )


def check_batch_documents(body: bytes | bytearray, max_documents: int) -> None:
    """422 when a batch body holds more objects than a batch may have documents (and the
    batch itself), counted in its bytes before it is parsed: parsing builds every item
    first (2.9 M tiny ones in a 32 MB body took 1.8 GB), so the count must come first. A
    brace in a text opens no object: when the body holds more braces than the limit, its
    strings and braces are scanned in order, and the count stops once it is past the limit
    (a hostile body costs a few thousand matches, never a copy of itself)."""
    if _braces_at_most(body, max_documents + 1):
        return
    objects = 0
    for token in _STRING_OR_BRACE.finditer(body):
        objects += token.group()[0] == _BRACE
        if objects > max_documents + 1:
            raise InvalidRequestError(
                f"more than {max_documents} documents in one batch; the limit is "
                f"{max_documents} (DOCPIPE_MAX_BATCH_DOCUMENTS: split it into several batches)"
            )


def _braces_at_most(body: bytes | bytearray, most: int) -> bool:
    """Whether ``body`` holds at most ``most`` braces, counted a MiB at a time: one count of
    a 32 MB body held the GIL for 20 ms (the event loop waited); a MiB holds it for under
    one, and a hostile body is past the limit within its first MiB."""
    braces = 0
    for start in range(0, len(body), _COUNT_SLICE):
        braces += body.count(b"{", start, start + _COUNT_SLICE)
        if braces > most:
            return False
    return True


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


def accepted_callback_url(
    db: Database, settings: Settings, tenant: str, url: HttpUrl | None
) -> str | None:
    """The URL to store, or an error (409, 403) saying what to do instead."""
    if url is None:
        return None
    if not settings.webhooks_enabled:
        raise ConflictError(
            "callback_url: this deployment sends no webhooks (DOCPIPE_WEBHOOKS_ENABLED is "
            "off); follow the run with GET /runs/{id} or its event stream instead"
        )
    try:
        DestinationPolicy.from_allowlist(settings.webhook_allowed_destinations).check_submitted(
            str(url)
        )
    except DestinationRefused as exc:
        raise HTTPException(
            403, f"callback_url: {exc}; webhooks are sent to public addresses only"
        ) from None
    if not has_current_secret(db, tenant):
        raise ConflictError(
            f"callback_url: tenant {tenant!r} has no webhook signing secret yet; create one "
            "with POST /webhook-secret (it is shown once, keep it for your receiver to verify "
            "the webhooks), then submit again"
        )
    return str(url)
