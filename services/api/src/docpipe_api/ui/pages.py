"""Rendering the web pages: Jinja2 templates (one file per page, ``templates/``) with every
value escaped, the request's CSP nonce on every script and a fresh CSRF token in every form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

__all__ = ["STATIC_DIR", "age", "go_to", "render", "render_error"]

_HERE = Path(__file__).resolve().parent
STATIC_DIR = _HERE / "static"

_env = Environment(
    loader=FileSystemLoader(_HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def age(since: datetime | None, now: datetime | None = None) -> str:
    """How long ago ``since`` was, as a person says it: "45 s", "12 min", "3 h 5 min", "2 d"."""
    if since is None:
        return ""
    seconds = max(0, int(((now or datetime.now(UTC)) - since).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} d"


def _usd(value: Decimal | float | None) -> str:
    return "" if value is None else f"${Decimal(value):.4f}"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _show(value: Any) -> str:
    """A value as a reviewer reads it: text as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


_env.filters.update(age=age, usd=_usd, pretty=_pretty, show=_show)


def render(
    request: Request,
    template: str,
    context: Mapping[str, Any] | None = None,
    *,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> HTMLResponse:
    """``template`` rendered for ``request``."""
    root = request.scope.get("root_path", "")
    state = request.state
    masked = getattr(state, "csrf_token", None)

    def csrf_field() -> Markup:
        assert masked is not None, "a form on a page that CsrfMiddleware did not see"
        return Markup('<input type="hidden" name="csrf_token" value="{}">').format(masked())

    page = _env.get_template(template).render(
        {
            "request": request,
            "root": root,
            "nonce": getattr(state, "csp_nonce", ""),
            "csrf_field": csrf_field,
            "signed_in": getattr(state, "tenant", None) is not None,
            "tenant": getattr(state, "tenant", None),
            **(context or {}),
        }
    )
    return HTMLResponse(page, status_code, headers=dict(headers or {}))


def go_to(request: Request, path: str) -> RedirectResponse:
    """A 303 to the page at ``path`` (below the pages' root): where a form's answer goes."""
    return RedirectResponse(f"{request.scope.get('root_path', '')}{path}", 303)


def render_error(
    request: Request,
    status_code: int,
    title: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
) -> HTMLResponse:
    """A plain error page: what went wrong, and that nothing changed."""
    context = {"title": title, "detail": detail, "status_code": status_code}
    return render(request, "error.html", context, status_code=status_code, headers=headers)
