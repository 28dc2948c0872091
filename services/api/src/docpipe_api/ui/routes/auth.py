"""Signing in with an API key, and out; the home page."""

from __future__ import annotations

import logging
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from docpipe.state.tenants import InvalidApiKey
from docpipe_api.deps import resources_of, tenant_of_key
from docpipe_api.ui.deps import FormDep
from docpipe_api.ui.pages import render
from docpipe_api.ui.session import SIGN_IN_REASONS, Session, replace_session, sign_in_url

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter()


def _safe_next(root: str, next_path: str) -> str:
    """Where to go after signing in: a page of this app only (never another site)."""
    if (
        next_path.startswith("/")
        and not next_path.startswith(("//", "/\\"))
        and "\\" not in next_path
    ):
        return root + next_path
    return f"{root}/"


@router.get("/sign-in")
def sign_in_page(
    request: Request,
    why: Annotated[str, Query(max_length=20)] = "",
    next: Annotated[str, Query(max_length=2000)] = "",
) -> Response:
    return render(request, "sign_in.html", {"message": SIGN_IN_REASONS.get(why), "next": next,
                  "error": None, "auth": resources_of(request).settings.auth})  # fmt: skip


@router.post("/sign-in")
async def sign_in(request: Request, form: FormDep) -> Response:
    """A new session holding the key, once it is valid; the page again with why not."""
    resources = resources_of(request)
    key, next_path = form.get("api_key").strip(), form.get("next")
    try:
        await anyio.to_thread.run_sync(tenant_of_key, resources, key)
    except InvalidApiKey as exc:
        log.info("web pages: sign-in refused: %s", exc)
        return render(request, "sign_in.html", {"message": None, "next": next_path,
                      "error": str(exc), "auth": resources.settings.auth},
                      status_code=401)  # fmt: skip
    replace_session(request, Session(api_key=key))
    return RedirectResponse(_safe_next(request.scope.get("root_path", ""), next_path), 303)


@router.post("/sign-out")
def sign_out(request: Request) -> Response:
    replace_session(request, Session())
    return RedirectResponse(sign_in_url(request.scope.get("root_path", ""), "signed-out"), 303)


@router.get("/")
def home(request: Request) -> Response:
    return render(request, "home.html")
