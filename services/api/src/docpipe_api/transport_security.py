"""HSTS: ``Strict-Transport-Security`` on every answer to an HTTPS request, API and web
pages alike, once DOCPIPE_HSTS_MAX_AGE_S is set (a browser then never asks for the
deployment over plain HTTP, nor lets its user click through a certificate warning).

A request is HTTPS as uvicorn sees it: its own TLS, or X-Forwarded-Proto from a proxy it
trusts (``--forwarded-allow-ips``); under DOCPIPE_UI_SECURE_COOKIES=always every request
counts as one (a deployment served over HTTPS only, behind a proxy it cannot name).
"""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from docpipe_api.middleware import HttpMiddleware

__all__ = ["StrictTransportSecurity"]


class StrictTransportSecurity(HttpMiddleware):
    """ASGI middleware; reads the settings the app's lifespan opened."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        resources = getattr(scope["app"].state, "docpipe", None) if "app" in scope else None
        if resources is None:
            await self.app(scope, receive, send)
            return
        settings = resources.settings
        https = scope.get("scheme") == "https" or settings.ui_secure_cookies == "always"
        if not (settings.hsts_max_age_s and https):
            await self.app(scope, receive, send)
            return
        value = f"max-age={settings.hsts_max_age_s}; includeSubDomains".encode()

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"strict-transport-security", value)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_header)
