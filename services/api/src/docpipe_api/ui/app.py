"""The web pages' app, mounted by the API under ``/ui``: its middleware, errors and pages.

Security wraps every page, outermost first: the security headers with the request's CSP
nonce (docpipe_api.ui.headers), the session and its tenant (docpipe_api.ui.session), the
CSRF check of every form (docpipe_api.ui.csrf). The pages are a thin layer over the same
library functions the API's routes use, with the same tenant: another tenant's run is a
not-found page, exactly as it is a 404 on the API.
"""

from __future__ import annotations

import logging

import psycopg
import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe_api.errors import describe_validation_errors
from docpipe_api.ui.csrf import CsrfMiddleware
from docpipe_api.ui.headers import SecurityHeaders
from docpipe_api.ui.pages import STATIC_DIR, render_error
from docpipe_api.ui.routes import auth, batches, reviews, runs
from docpipe_api.ui.session import SessionMiddleware

__all__ = ["create_ui"]

log = logging.getLogger(__name__)


def create_ui() -> FastAPI:
    """The pages' app; the API's lifespan gives it the process' resources."""
    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    # add_middleware puts each new one outside the ones before it.
    ui.add_middleware(CsrfMiddleware)
    ui.add_middleware(SessionMiddleware)
    ui.add_middleware(SecurityHeaders)
    ui.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for router in (auth.router, reviews.router, runs.router, batches.router):
        ui.include_router(router)

    _install_error_pages(ui)
    return ui


def _install_error_pages(ui: FastAPI) -> None:
    """docpipe's errors as pages with the API's status codes; nothing is ever a stack trace."""

    @ui.exception_handler(NotFoundError)
    async def not_found(request: Request, exc: NotFoundError) -> Response:
        return render_error(request, 404, "Not found", str(exc))

    @ui.exception_handler(ConflictError)
    async def conflict(request: Request, exc: ConflictError) -> Response:
        return render_error(request, 409, "Not possible now", f"{exc} Nothing was changed.")

    @ui.exception_handler(InvalidRequestError)
    async def invalid(request: Request, exc: InvalidRequestError) -> Response:
        return render_error(request, 422, "Not accepted", f"{exc} Nothing was changed.")

    @ui.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> Response:
        return render_error(request, 422, "Not accepted", describe_validation_errors(exc.errors()))

    @ui.exception_handler(psycopg.OperationalError)
    async def database_down(request: Request, exc: psycopg.OperationalError) -> Response:
        log.warning("web pages: database unavailable: %s: %s", type(exc).__name__, exc)
        detail = "The database is unavailable; retry in a moment. Nothing was changed."
        return render_error(request, 503, "Unavailable", detail, headers={"Retry-After": "5"})

    @ui.exception_handler(redis.RedisError)
    async def broker_down(request: Request, exc: redis.RedisError) -> Response:
        log.warning("web pages: redis unavailable: %s: %s", type(exc).__name__, exc)
        return render_error(request, 503, "Unavailable", "The broker is unavailable; retry in "
                            "a moment.", headers={"Retry-After": "5"})  # fmt: skip

    @ui.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        titles = {404: "Not found", 405: "Not allowed", 429: "Too many requests"}
        return render_error(request, exc.status_code, titles.get(exc.status_code, "Refused"),
                            str(exc.detail), headers=exc.headers)  # fmt: skip
