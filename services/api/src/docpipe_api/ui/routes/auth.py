"""Signing in with an API key, and out."""

from __future__ import annotations

import logging
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from docpipe.state.tenants import InvalidApiKey
from docpipe.state.web_sessions import end_web_session, start_web_session
from docpipe_api.auth import tenant_of_key
from docpipe_api.resources import resources_of
from docpipe_api.ui.deps import FormDep
from docpipe_api.ui.pages import render
from docpipe_api.ui.session import (
    SIGN_IN_REASONS,
    Session,
    replace_session,
    session_of,
    sign_in_url,
)

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
    return render(
        request,
        "sign_in.html",
        {
            "message": SIGN_IN_REASONS.get(why),
            "next": next,
            "error": None,
            "auth": resources_of(request).settings.auth,
        },
    )


@router.post("/sign-in")
async def sign_in(request: Request, form: FormDep) -> Response:
    """A new session holding the key, once it is valid; the page again with why not."""
    resources = resources_of(request)
    key, next_path = form.get("api_key").strip(), form.get("next")

    def start() -> str:
        key_id, tenant = tenant_of_key(resources, key)
        return start_web_session(
            resources.database,
            tenant_id=tenant,
            api_key_id=key_id,
            max_age_s=resources.settings.ui_session_max_age_s,
        )

    try:
        session_id = await anyio.to_thread.run_sync(start)
    except InvalidApiKey as exc:
        log.info("web pages: sign-in refused: %s", exc)
        return render(
            request,
            "sign_in.html",
            {
                "message": None,
                "next": next_path,
                "error": str(exc),
                "auth": resources.settings.auth,
            },
            status_code=401,
        )
    replace_session(request, Session(api_key=key, session_id=session_id))
    return RedirectResponse(_safe_next(request.scope.get("root_path", ""), next_path), 303)


@router.post("/sign-out")
def sign_out(request: Request) -> Response:
    """Ends the session on the server too: its cookie, copied or kept, opens nothing after."""
    ended = session_of(request).session_id
    if ended is not None:
        end_web_session(resources_of(request).database, ended)
    replace_session(request, Session())
    return RedirectResponse(sign_in_url(request.scope.get("root_path", ""), "signed-out"), 303)
