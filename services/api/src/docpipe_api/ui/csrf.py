"""One CSRF check for every form of the web pages.

Each session holds a random secret (docpipe_api.ui.session). Every form carries a fresh
masked copy of it, ``base64(pad || pad XOR secret)`` with a new random pad each time, so
that no two pages carry the same bytes (it mitigates BREACH, as Rails and Sidekiq do). A
request that changes anything (every method but GET and HEAD) must send a form whose
``csrf_token`` unmasks to the session's secret; anything else is refused with a plain 403
page and a log line, before any page code runs. The form is parsed here once, within a
bound, and handed to the page in ``request.state.form``.

SameSite=Strict on the session cookie already keeps other sites' requests from carrying
it; this check is the second lock, and the one that also covers the sign-in form (whose
session has no key yet).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import secrets
from urllib.parse import parse_qsl

from starlette.requests import ClientDisconnect, Request
from starlette.types import Message, Receive, Scope, Send

from docpipe_api.errors import refusal_of
from docpipe_api.middleware import HttpMiddleware
from docpipe_api.ui.pages import render_error, render_refusal
from docpipe_api.ui.session import session_of

__all__ = ["FIELD", "MAX_FORM_BYTES", "CsrfMiddleware", "masked_token", "token_matches"]

log = logging.getLogger(__name__)

FIELD = "csrf_token"
# A review form carries a step's whole output: generous, but bounded.
MAX_FORM_BYTES = 2_000_000
MAX_FORM_FIELDS = 10_000
_SAFE_METHODS = ("GET", "HEAD")


def masked_token(secret: bytes) -> str:
    """A fresh masked copy of ``secret`` for one form."""
    pad = secrets.token_bytes(len(secret))
    return base64.urlsafe_b64encode(
        pad + bytes(a ^ b for a, b in zip(pad, secret, strict=True))
    ).decode()


def token_matches(token: str, secret: bytes) -> bool:
    """Whether ``token`` is a masked copy of ``secret``."""
    try:
        raw = base64.urlsafe_b64decode(token.encode())
    except (binascii.Error, ValueError):
        return False
    if len(raw) != 2 * len(secret):
        return False
    pad, masked = raw[: len(secret)], raw[len(secret) :]
    return hmac.compare_digest(bytes(a ^ b for a, b in zip(pad, masked, strict=True)), secret)


class CsrfMiddleware(HttpMiddleware):
    """Refuses (403) every state-changing request without a valid token; parses the form of
    those it lets through into ``request.state.form`` (a list of (name, value))."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        secret = session_of(request).csrf_secret
        request.state.csrf_token = lambda: masked_token(session_of(request).csrf_secret)
        request.state.form = []
        if request.method in _SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        try:
            status, refusal, form, body = await self._read_form(request)
        except ClientDisconnect as exc:  # answered as the API answers it (nobody reads it)
            await render_refusal(request, refusal_of(request, exc))(scope, receive, send)
            return
        if refusal is None and not token_matches(dict(form).get(FIELD, ""), secret):
            status, refusal = 403, "a missing or forged CSRF token"
        if refusal is not None:
            log.warning("web pages: refused %s %s: %s", request.method, request.url.path, refusal)
            response = render_error(
                request,
                status,
                "Refused",
                f"This request was refused ({refusal}). Nothing was changed. "
                "Reload the page and try again.",
            )
            await response(scope, receive, send)
            return
        request.state.form = form
        await self.app(scope, _replay(body), send)

    @staticmethod
    async def _read_form(
        request: Request,
    ) -> tuple[int, str | None, list[tuple[str, str]], bytes]:
        """(status, why it is refused or None, the form's fields, the body as read)."""
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        # Untyped is read as a form too (an empty one is what a form of no fields may send).
        if media_type not in ("application/x-www-form-urlencoded", ""):
            return 415, "not a form", [], b""
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return 413, f"a form larger than {MAX_FORM_BYTES} bytes", [], b""
        try:
            form = parse_qsl(
                body.decode(),
                keep_blank_values=True,
                strict_parsing=False,
                max_num_fields=MAX_FORM_FIELDS,
            )
        except (UnicodeDecodeError, ValueError):
            return 400, "a form that cannot be read", [], b""
        return 200, None, form, bytes(body)


def _replay(body: bytes) -> Receive:
    """A ``receive`` that hands the page the body this middleware already read."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive
