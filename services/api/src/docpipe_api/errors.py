"""docpipe's errors as HTTP answers, all shaped ``{"detail": "<one clear sentence>"}``.

No valid API key -> 401, NotFoundError -> 404, ConflictError -> 409, InvalidRequestError and
malformed requests -> 422, too many requests -> 429, PostgreSQL or Redis unreachable (or too
slow: every client has timeouts) or the rows to change locked for too long -> 503 with
Retry-After. Bad input is never a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg
import redis
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe_api.schemas import ErrorBody

__all__ = ["describe_validation_errors", "error_responses", "install_error_handlers"]

log = logging.getLogger(__name__)

_DESCRIPTIONS = {
    401: "No API key, or one that is malformed, unknown or revoked",
    403: "Refused by policy: a callback_url to a destination webhooks may not reach",
    404: "No such document, run, batch or pipeline",
    409: "The request contradicts stored state",
    413: "The body, or a document in it, is larger than allowed",
    415: "The body's Content-Type is not accepted",
    422: "The request is malformed",
    429: "This client address or API key sent too many requests this minute, or the key "
    "has as many event streams open as it may; retry after Retry-After seconds",
    503: "PostgreSQL or Redis is unavailable, the rows to change stayed busy, or the process "
    "holds as many batch bodies as it may; retry after Retry-After seconds",
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
    """OpenAPI ``responses`` entries for these error codes, all with an ErrorBody."""
    return {
        code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]}
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


def _error(
    status_code: int,
    message: str,
    *,
    retry_after_s: int | None = None,
    details: dict[str, Any] | None = None,
) -> JSONResponse:
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    content = {"detail": message, **jsonable_encoder(details or {})}
    return JSONResponse(status_code=status_code, content=content, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(NotFoundError)
    async def not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(ConflictError)
    async def conflict(_: Request, exc: ConflictError) -> JSONResponse:
        return _error(409, str(exc), details=exc.details)

    @app.exception_handler(InvalidRequestError)
    async def invalid_request(_: Request, exc: InvalidRequestError) -> JSONResponse:
        return _error(422, str(exc), details=exc.details)

    @app.exception_handler(RequestValidationError)
    async def invalid_parameters(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, describe_validation_errors(exc.errors()))

    # PoolTimeout (no connection free in time) and QueryCanceled (statement_timeout) are
    # OperationalErrors too.
    @app.exception_handler(psycopg.OperationalError)
    async def database_unavailable(_: Request, exc: psycopg.OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s: %s", type(exc).__name__, exc)
        return _error(503, "the database is unavailable, retry later",
                      retry_after_s=_UNAVAILABLE_RETRY_AFTER_S)  # fmt: skip

    # A statement that gave up waiting for a row lock (docpipe.state.batches.stop_batch under a
    # storm of worker writes) changed nothing; the database itself is fine.
    @app.exception_handler(psycopg.errors.LockNotAvailable)
    async def rows_busy(_: Request, exc: psycopg.errors.LockNotAvailable) -> JSONResponse:
        log.warning("rows busy: %s", exc)
        return _error(503, "the rows this request changes stayed busy; nothing changed, retry",
                      retry_after_s=1)  # fmt: skip

    # Redis is asked directly only where it is optional or best effort (the rate limit, a
    # cancel's purge of waiting messages); anything else that reaches it and fails, or
    # times out, is an outage answer, never a 500.
    @app.exception_handler(redis.RedisError)
    async def broker_unavailable(_: Request, exc: redis.RedisError) -> JSONResponse:
        log.warning("redis unavailable: %s: %s", type(exc).__name__, exc)
        return _error(503, "the broker (Redis) is unavailable, retry later",
                      retry_after_s=_UNAVAILABLE_RETRY_AFTER_S)  # fmt: skip

    # A client that went away in the middle of its body (or stalled until the server gave up)
    # changed nothing; no one reads this answer, and it is no server error.
    @app.exception_handler(ClientDisconnect)
    async def client_gone(_: Request, exc: ClientDisconnect) -> JSONResponse:
        log.info("client disconnected before its request body was complete")
        return _error(400, "the request body ended early")

    # Starlette answers 405 from the first route whose path matches, so its Allow header
    # would name that route's methods only (PUT, for /documents/{id} which also has GET).
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            allowed = [
                method
                for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
                if any(
                    route.matches({**request.scope, "method": method})[0] == Match.FULL
                    for route in request.app.router.routes
                )
            ]
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
        return await http_exception_handler(request, exc)
