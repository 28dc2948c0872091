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

from docpipe.pipelines.evidence import Support, support_label, support_of
from docpipe_api.errors import Refusal

__all__ = ["STATIC_DIR", "age", "go_to", "render", "render_error", "render_refusal"]

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


def _record(value: Any) -> Mapping[str, Any]:
    """An evidence record as a mapping (the API's model of one, or the record itself)."""
    return value if isinstance(value, Mapping) else value.model_dump()


def _support(value: Any) -> str:
    return support_label(_record(value))


def _support_class(value: Any) -> str:
    """The mark a value's evidence gets: supported, corrected (a person's), or unsupported."""
    support = support_of(_record(value))
    return "unsupported" if support not in (Support.SUPPORTED, Support.CORRECTED) else support


def _percent(value: float | None) -> str:
    """A share as a person reads it: "83.3 %"; nothing measured: "n/a"."""
    return "n/a" if value is None else f"{value * 100:.1f} %"


def _signed(value: float | None) -> str:
    """A change of a share in points, with its sign: "+2.5 pts", "-10.0 pts"."""
    return "n/a" if value is None else f"{value * 100:+.1f} pts"


def _count(value: float) -> str:
    """A weighted count: whole ones without their ".0" ("47"), others as they are ("2.5")."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} ms"


_env.filters.update(
    age=age,
    percent=_percent,
    signed=_signed,
    ms=_ms,
    count=_count,
    usd=_usd,
    pretty=_pretty,
    show=_show,
    support=_support,
    support_class=_support_class,
)


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


# A page's heading for each status the error map answers with.
_TITLES = {
    400: "Not accepted",
    404: "Not found",
    405: "Not allowed",
    409: "Not possible now",
    422: "Not accepted",
    429: "Too many requests",
    503: "Unavailable",
}


def render_refusal(request: Request, refusal: Refusal) -> HTMLResponse:
    """docpipe's errors as pages with the API's status codes and headers (the one map:
    docpipe_api.errors.refusal_of); nothing is ever a stack trace."""
    detail = refusal.detail
    if refusal.changed_nothing:
        detail = f"{detail.rstrip('.')}. Nothing was changed."
    title = _TITLES.get(refusal.status, "Refused")
    return render_error(request, refusal.status, title, detail, headers=refusal.headers)
