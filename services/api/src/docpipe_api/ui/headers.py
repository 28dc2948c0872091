"""Security headers on every answer of the web pages, the Content-Security-Policy first.

Each request gets a fresh nonce (``request.state.csp_nonce``); only scripts carrying it
run, and there is no ``unsafe-inline`` anywhere: a value that slipped through escaping
still could not run script, nor load anything from another origin, nor post a form
elsewhere. Styles come from the pages' own stylesheet only (positions computed by script
are set through the CSSOM, which the policy allows). Pages are never cached (they show a
tenant's data) and never framed.
"""

from __future__ import annotations

import secrets

from starlette.types import Message, Receive, Scope, Send

from docpipe_api.middleware import HttpMiddleware

__all__ = ["SecurityHeaders", "content_security_policy"]


def content_security_policy(nonce: str) -> str:
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src 'nonce-{nonce}'",
            "style-src 'self'",
            "img-src 'self'",
            "connect-src 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        )
    )


class SecurityHeaders(HttpMiddleware):
    """ASGI middleware: the nonce, the policy and the other headers every page carries."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        nonce = secrets.token_urlsafe(18)
        scope.setdefault("state", {})["csp_nonce"] = nonce
        static = scope["path"].startswith(f"{scope.get('root_path', '')}/static/")
        extra = [
            (b"content-security-policy", content_security_policy(nonce).encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"),
            (b"cross-origin-opener-policy", b"same-origin"),
        ]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not static:
                    headers = [(k, v) for k, v in headers if k != b"cache-control"]
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": [*headers, *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
