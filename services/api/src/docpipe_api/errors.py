"""docpipe's errors as HTTP answers, all shaped ``{"detail": "<one clear sentence>"}``.

No valid API key -> 401, NotFoundError -> 404, ConflictError -> 409, InvalidRequestError,
malformed requests and a page that cannot be drawn (UnreadableDocumentError) -> 422, too
many requests -> 429, PostgreSQL or Redis unreachable (or too slow: every client has
timeouts), the rows to change locked for too long or as many heavy requests in the process
as it may take (docpipe_api.heavy.Busy) -> 503 with Retry-After, a body that ended early ->
400. Bad input is never a 500.

:func:`refusal_of` is that map, written once: the API answers it as JSON and the web pages
(docpipe_api.ui.app) as an error page with the same status and headers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
import redis
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from docpipe.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    UnreadableDocumentError,
)
from docpipe_api.heavy import Busy
from docpipe_api.schemas import ErrorOut

__all__ = [
    "HANDLED",
    "Refusal",
    "describe_validation_errors",
    "error_responses",
    "install_error_handlers",
    "refusal_of",
]

log = logging.getLogger(__name__)

_DESCRIPTIONS = {
    401: "No API key, or one that is malformed, unknown or revoked",
    403: "Refused by policy: a callback_url to a destination webhooks may not reach",
    404: "No such document, run, batch or pipeline",
    409: "The request contradicts stored state",
    413: "The body, or a document in it, is larger than allowed",
    415: "The body's Content-Type is not accepted",
    422: "The request is malformed, or names a page that cannot be drawn",
    429: "This client address or API key sent too many requests this minute, or the key "
    "has as many event streams open as it may; retry after Retry-After seconds",
    503: "PostgreSQL or Redis is unavailable, the rows to change stayed busy, or the process "
    "holds as many batch bodies or heavy requests as it may; retry after Retry-After seconds",
}


_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
    429: {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}},
    503: {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}},
}

# How long a client should wait before retrying after an outage answer: long enough for a
# restarted server or a failed-over connection, short enough not to stall interactive use.
_UNAVAILABLE_RETRY_AFTER_S = 5


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these error codes, all with an ErrorOut."""
    return {
        code: {"model": ErrorOut, "description": _DESCRIPTIONS[code]}
        | ({"headers": _HEADERS[code]} if code in _HEADERS else {})
        for code in codes
    }


def describe_validation_errors(errors: Sequence[Any], *, prefix: str = "") -> str:
    """Pydantic's error list as one line: ``body.lane: Input should be ...; ...``."""
    parts = []
    for error in errors:
        loc = ".".join(str(p) for p in (*((prefix,) if prefix else ()), *error.get("loc", ())))
        parts.append(f"{loc}: {error.get('msg', 'invalid')}" if loc else str(error.get("msg")))
    return "; ".join(parts) or "invalid request"


@dataclass(frozen=True)
class Refusal:
    """An error as both doors answer it: the API as JSON (``{"detail", **details}``), the
    pages as an error page titled by its status (``changed_nothing``: the page says so)."""

    status: int
    detail: str
    headers: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    changed_nothing: bool = False


# The errors the map knows: a handler each (Starlette picks the closest class of an error).
HANDLED: tuple[type[Exception], ...] = (
    NotFoundError,
    ConflictError,
    InvalidRequestError,
    UnreadableDocumentError,
    Busy,
    RequestValidationError,
    psycopg.errors.LockNotAvailable,
    psycopg.OperationalError,
    redis.RedisError,
    ClientDisconnect,
    StarletteHTTPException,
)


def refusal_of(request: Request, exc: Exception) -> Refusal:
    """The one map from an error to its status and sentence (for an error of HANDLED)."""
    if isinstance(exc, NotFoundError):
        return Refusal(404, str(exc))
    if isinstance(exc, ConflictError):
        return Refusal(409, str(exc), details=exc.details, changed_nothing=True)
    if isinstance(exc, InvalidRequestError):
        return Refusal(422, str(exc), details=exc.details, changed_nothing=True)
    if isinstance(exc, UnreadableDocumentError):
        # A page that cannot be drawn (too large, too slow, ...): its kind and why.
        return Refusal(422, str(exc), changed_nothing=True)
    if isinstance(exc, Busy):
        headers = {"Retry-After": str(exc.retry_after_s)}
        return Refusal(503, str(exc), headers=headers, changed_nothing=True)
    if isinstance(exc, RequestValidationError):
        return Refusal(422, describe_validation_errors(exc.errors()))
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        # A statement that gave up waiting for a row lock (docpipe.state.batches.stop_batch
        # under a storm of worker writes) changed nothing; the database itself is fine.
        log.warning("rows busy: %s", exc)
        detail = "the rows this request changes stayed busy; nothing changed, retry"
        return Refusal(503, detail, headers={"Retry-After": "1"})
    if isinstance(exc, psycopg.OperationalError):
        # PoolTimeout (no connection free in time) and QueryCanceled (statement_timeout)
        # are OperationalErrors too.
        log.warning("database unavailable: %s: %s", type(exc).__name__, exc)
        return _unavailable("the database is unavailable, retry later")
    if isinstance(exc, redis.RedisError):
        # Redis is asked directly only where it is optional or best effort (the rate limit,
        # a cancel's purge of waiting messages); anything else that reaches it and fails,
        # or times out, is an outage answer, never a 500.
        log.warning("redis unavailable: %s: %s", type(exc).__name__, exc)
        return _unavailable("the broker (Redis) is unavailable, retry later")
    if isinstance(exc, ClientDisconnect):
        # A client that went away in the middle of its body (or stalled until the server
        # gave up) changed nothing; no one reads this answer, and it is no server error.
        log.info("client disconnected before its request body was complete")
        return Refusal(400, "the request body ended early")
    assert isinstance(exc, StarletteHTTPException), f"{type(exc).__name__} is not in HANDLED"
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return Refusal(exc.status_code, str(exc.detail), headers=headers)


def _unavailable(detail: str) -> Refusal:
    headers = {"Retry-After": str(_UNAVAILABLE_RETRY_AFTER_S)}
    return Refusal(503, detail, headers=headers, changed_nothing=True)


def _allowed_methods(request: Request) -> list[str]:
    """Starlette answers 405 from the first route whose path matches, so its Allow header
    would name that route's methods only (PUT, for /documents/{id} which also has GET)."""
    return [
        method
        for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.router.routes
        )
    ]


Respond = Callable[[Request, Refusal], Response]


def install_error_handlers(app: FastAPI, respond: Respond | None = None) -> None:
    """Answer every error of HANDLED through :func:`refusal_of` and ``respond`` (default:
    the API's JSON body); the web pages pass their error page."""
    answer = respond or _json_answer

    async def handle(request: Request, exc: Exception) -> Response:
        return answer(request, refusal_of(request, exc))

    for kind in HANDLED:
        app.add_exception_handler(kind, handle)


def _json_answer(_: Request, refusal: Refusal) -> Response:
    if refusal.status in (204, 304) or refusal.status < 200:
        return Response(status_code=refusal.status, headers=dict(refusal.headers))
    content = {"detail": refusal.detail, **jsonable_encoder(dict(refusal.details))}
    return JSONResponse(status_code=refusal.status, content=content, headers=dict(refusal.headers))
