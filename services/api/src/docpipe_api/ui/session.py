"""The web pages' session: who is signed in, in a cookie only this deployment can read,
naming a session kept on the server.

The cookie holds the API key the person signed in with, the session's CSRF secret and the
id of its session on the server (docpipe.state.web_sessions),
encrypted and authenticated with Fernet (AES-CBC + HMAC-SHA256, with the time it was
made) under a key derived from DOCPIPE_SECRETS_KEY, so it cannot be read, forged or kept
past its expiry (DOCPIPE_UI_SESSION_MAX_AGE_S), and it is HttpOnly, SameSite=Strict,
Path=/ui and Secure whenever the request came over TLS (as uvicorn sees it: a proxy it
trusts says so with X-Forwarded-Proto) or DOCPIPE_UI_SECURE_COOKIES is ``always``. On every
request (:class:`SessionMiddleware`) its session must be live on the server (signing out
ends it there, so a copied cookie stops working at once) and its key is checked again,
exactly as a bearer token is: a revoked key's or an ended session's cookie sends its holder
to the sign-in page, with a message saying why.

Without DOCPIPE_SECRETS_KEY the pages refuse to serve under DOCPIPE_AUTH=keys (there is no
default secret); under DOCPIPE_AUTH=none, where a session holds no key, a random key of
this process is used.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anyio.to_thread
from cryptography.fernet import Fernet, InvalidToken
from fastapi import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docpipe.settings import Settings
from docpipe.state.tenants import DEFAULT_TENANT, InvalidApiKey, RevokedApiKey
from docpipe.state.web_sessions import web_session_is_live
from docpipe_api.auth import limit_client_address, tenant_of_key
from docpipe_api.middleware import HttpMiddleware
from docpipe_api.resources import Resources
from docpipe_api.ui.pages import render_error

__all__ = [
    "COOKIE",
    "SIGN_IN_REASONS",
    "Session",
    "SessionCodec",
    "SessionMiddleware",
    "replace_session",
    "session_of",
    "sign_in_url",
]

log = logging.getLogger(__name__)

COOKIE = "docpipe_ui"
# Pages anyone may open (signing in needs no session), and the stylesheet and scripts, which
# are the same for everyone.
_PUBLIC = ("/sign-in",)
_STATIC = "/static/"
# Why the sign-in page is shown: a fixed set, so no text of the URL is ever echoed.
SIGN_IN_REASONS = {
    "expired": "Your session expired. Sign in again.",
    "revoked": "The API key you signed in with was revoked. Sign in with another key.",
    "invalid": "The API key you signed in with is no longer valid. Sign in again.",
    "signed-out": "You are signed out.",
    "ended": "This session was signed out. Sign in again.",
    "required": "Sign in with an API key to see this page.",
}


@dataclass
class Session:
    """One browser's session: the CSRF secret of its forms and, once signed in, its key."""

    csrf_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    api_key: str | None = None
    # Its session on the server (docpipe.state.web_sessions), once signed in.
    session_id: str | None = None
    # Set when the session must be written back (new, signed in, signed out).
    changed: bool = True
    # Why an earlier cookie was not accepted ("expired"), for the sign-in page.
    lapsed: str | None = None


def session_of(request: Request) -> Session:
    session = request.state.session
    assert isinstance(session, Session), "SessionMiddleware did not run"
    return session


def replace_session(request: Request, session: Session) -> None:
    """Make ``session`` the request's: the cookie is rewritten with the response."""
    request.state.session = session


def sign_in_url(root_path: str, reason: str, next_path: str | None = None) -> str:
    url = f"{root_path}/sign-in?why={reason}"
    return url + (f"&next={quote(next_path, safe='/')}" if next_path else "")


class SessionCodec:
    """Sessions to and from the cookie's value."""

    def __init__(self, settings: Settings) -> None:
        self.max_age_s = settings.ui_session_max_age_s
        self.secure = settings.ui_secure_cookies == "always"
        secret = settings.secrets_key.get_secret_value()
        if secret:
            # Its own key, derived from the deployment's: cookies and stored webhook secrets
            # never share one.
            derived = hmac.new(
                base64.urlsafe_b64decode(secret), b"docpipe ui session cookie", hashlib.sha256
            ).digest()
            self.fernet: Fernet | None = Fernet(base64.urlsafe_b64encode(derived))
        elif settings.auth == "none":
            self.fernet = Fernet(Fernet.generate_key())
        else:
            self.fernet = None

    def dump(self, session: Session) -> str:
        assert self.fernet is not None
        body = {
            "c": base64.b64encode(session.csrf_secret).decode(),
            "k": session.api_key,
            "s": session.session_id,
        }
        return self.fernet.encrypt(json.dumps(body).encode()).decode()

    def load(self, value: str | None) -> Session:
        """The cookie's session; a new, empty one when there is none or it is not valid."""
        if not value or self.fernet is None:
            return Session()
        token = value.encode()
        try:
            body: dict[str, Any] = json.loads(self.fernet.decrypt(token, ttl=int(self.max_age_s)))
            return Session(base64.b64decode(body["c"]), body.get("k"), body.get("s"), changed=False)
        except InvalidToken:
            return Session(lapsed="expired" if self._only_expired(token) else None)
        except (ValueError, KeyError, TypeError):
            return Session()

    def _only_expired(self, token: bytes) -> bool:
        assert self.fernet is not None
        try:
            made = self.fernet.extract_timestamp(token)  # checks the signature
        except InvalidToken:
            return False
        return time.time() - made > self.max_age_s


class SessionMiddleware(HttpMiddleware):
    """Every page's session and, except on the sign-in page, its tenant.

    Reads the cookie, checks its key with the same function the API's bearer tokens are
    checked with (DOCPIPE_CLIENT_IP_RPM and DOCPIPE_API_KEY_RPM included), and puts the
    tenant and key id in ``request.state`` (``tenant``, ``api_key_id``); a page of a session
    without a valid key redirects to the sign-in page, saying why. The cookie is written
    back whenever the session changed."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app)
        self._codecs: dict[int, SessionCodec] = {}

    def _codec(self, settings: Settings) -> SessionCodec:
        # One per settings object: tests build apps with different settings in one process.
        if (codec := self._codecs.get(id(settings))) is None:
            codec = self._codecs[id(settings)] = SessionCodec(settings)
        return codec

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        if _page_path(scope).startswith(_STATIC):
            # The same files for everyone: no session, no key to check, no cookie written.
            replace_session(request, Session(changed=False))
            await self.app(scope, receive, send)
            return
        resources: Resources = scope["app"].state.docpipe
        codec = self._codec(resources.settings)
        if codec.fernet is None:
            detail = (
                "The web pages need DOCPIPE_SECRETS_KEY: their session cookies are "
                "encrypted with a key derived from it."
            )
            response = render_error(request, 503, "The web pages are not configured", detail)
            await response(scope, receive, send)
            return
        session = codec.load(request.cookies.get(COOKIE))
        replace_session(request, session)
        public = _page_path(scope).startswith(_PUBLIC)
        try:
            refusal = await anyio.to_thread.run_sync(self._authenticate, request, resources)
        except HTTPException as exc:  # 429 from a rate limit, the sign-in page's too
            refusal, public = (
                render_error(
                    request,
                    exc.status_code,
                    "Too many requests",
                    str(exc.detail),
                    headers=exc.headers,
                ),
                False,
            )
        send_with_cookie = self._with_cookie(request, codec, send)
        if refusal is not None and not public:
            await refusal(scope, receive, send_with_cookie)
            return
        await self.app(scope, receive, send_with_cookie)

    def _authenticate(self, request: Request, resources: Resources) -> Response | None:
        """Puts the tenant in ``request.state``; the answer to send instead when there is
        no valid key."""
        limit_client_address(request, resources)
        if resources.settings.auth == "none":
            request.state.tenant, request.state.api_key_id = DEFAULT_TENANT, None
            return None
        session = session_of(request)
        root = request.scope.get("root_path", "")
        next_path = _page_path(request.scope) if request.method == "GET" else None
        if session.api_key is None:
            return RedirectResponse(sign_in_url(root, session.lapsed or "required", next_path), 303)
        if session.session_id is None or not web_session_is_live(
            resources.database, session.session_id
        ):
            log.info("web pages: a cookie of a session that ended (signed out or expired)")
            replace_session(request, Session(lapsed="ended"))
            return RedirectResponse(sign_in_url(root, "ended", next_path), 303)
        try:
            key_id, tenant = tenant_of_key(resources, session.api_key)
        except InvalidApiKey as exc:
            reason = "revoked" if isinstance(exc, RevokedApiKey) else "invalid"
            log.info("web pages: a session's key is not valid (%s): %s", reason, exc)
            replace_session(request, Session(lapsed=reason))
            return RedirectResponse(sign_in_url(root, reason, next_path), 303)
        request.state.tenant, request.state.api_key_id = tenant, key_id
        return None

    @staticmethod
    def _with_cookie(request: Request, codec: SessionCodec, send: Send) -> Send:
        async def send_with_cookie(message: Message) -> None:
            session = session_of(request)
            if message["type"] == "http.response.start" and session.changed:
                cookie = Response()
                cookie.set_cookie(
                    COOKIE,
                    codec.dump(session),
                    max_age=int(codec.max_age_s),
                    path=request.scope.get("root_path", "") or "/",
                    secure=codec.secure or request.url.scheme == "https",
                    httponly=True,
                    samesite="strict",
                )
                headers = list(message.get("headers", []))
                headers += [(k, v) for k, v in cookie.raw_headers if k == b"set-cookie"]
                message = {**message, "headers": headers}
            await send(message)

        return send_with_cookie


def _page_path(scope: Scope) -> str:
    """The path below the pages' root (``/runs/...``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path
