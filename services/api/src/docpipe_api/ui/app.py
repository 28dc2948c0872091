"""The web pages' app, mounted by the API under ``/ui``: its middleware, errors and pages.

Security wraps every page, outermost first: the security headers with the request's CSP
nonce (docpipe_api.ui.headers), the session and its tenant (docpipe_api.ui.session), the
CSRF check of every form (docpipe_api.ui.csrf). The pages are a thin layer over the same
actions the API's routes call (docpipe_api.actions), with the same tenant: another
tenant's run is a not-found page, exactly as it is a 404 on the API; every error is
answered from the API's own map (docpipe_api.errors.refusal_of).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from docpipe_api.errors import install_error_handlers
from docpipe_api.ui.csrf import CsrfMiddleware
from docpipe_api.ui.headers import SecurityHeaders
from docpipe_api.ui.pages import STATIC_DIR, render_refusal
from docpipe_api.ui.routes import auth, batches, evaluations, home, reviews, runs
from docpipe_api.ui.session import SessionMiddleware

__all__ = ["create_ui"]


def create_ui() -> FastAPI:
    """The pages' app; the API's lifespan gives it the process' resources."""
    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    # add_middleware puts each new one outside the ones before it.
    ui.add_middleware(CsrfMiddleware)
    ui.add_middleware(SessionMiddleware)
    ui.add_middleware(SecurityHeaders)
    ui.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for router in (
        auth.router,
        home.router,
        reviews.router,
        runs.router,
        batches.router,
        evaluations.router,
    ):
        ui.include_router(router)

    install_error_handlers(ui, render_refusal)
    return ui
