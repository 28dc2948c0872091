"""docpipe's errors as HTTP answers, all shaped ``{"detail": "<one clear sentence>"}``.

NotFoundError -> 404, ConflictError -> 409, InvalidRequestError and malformed requests -> 422,
PostgreSQL unreachable -> 503. Bad input is never a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe_api.schemas import ErrorBody

__all__ = ["describe_validation_errors", "error_responses", "install_error_handlers"]

log = logging.getLogger(__name__)

_DESCRIPTIONS = {
    404: "No such document, run or batch",
    409: "The request contradicts stored state",
    413: "The body is larger than allowed",
    415: "The body's Content-Type is not accepted",
    422: "The request is malformed",
    503: "A dependency (PostgreSQL) is unavailable; retry later",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these error codes, all with an ErrorBody."""
    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in codes}


def describe_validation_errors(errors: Sequence[Any], *, prefix: str = "") -> str:
    """Pydantic's error list as one line: ``body.lane: Input should be ...; ...``."""
    parts = []
    for error in errors:
        loc = ".".join(str(p) for p in (*((prefix,) if prefix else ()), *error.get("loc", ())))
        parts.append(f"{loc}: {error.get('msg', 'invalid')}" if loc else str(error.get("msg")))
    return "; ".join(parts) or "invalid request"


def _error(status_code: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status_code, content={"detail": message})


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(NotFoundError)
    async def not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(ConflictError)
    async def conflict(_: Request, exc: ConflictError) -> JSONResponse:
        return _error(409, str(exc))

    @app.exception_handler(InvalidRequestError)
    async def invalid_request(_: Request, exc: InvalidRequestError) -> JSONResponse:
        return _error(422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid_parameters(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, describe_validation_errors(exc.errors()))

    # PoolTimeout (no connection free in time) is an OperationalError too.
    @app.exception_handler(psycopg.OperationalError)
    async def database_unavailable(_: Request, exc: psycopg.OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        return _error(503, "the database is unavailable, retry later")
