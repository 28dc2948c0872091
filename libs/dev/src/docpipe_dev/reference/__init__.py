"""The docs site's reference pages, generated from the code each time the site is built, so
they cannot drift from it: the settings from the ``Settings`` model, the HTTP API from the
app's OpenAPI document, the chart's values from ``values.schema.json``, the metrics from
``docpipe.observability.metrics``, the CLI from its parsers, and each alert's rule beside
its runbook section.

A page asks for a generated part with a marker, ``<!-- reference: settings -->`` (or
``<!-- reference: alert NAME -->``), which :mod:`docpipe_dev.reference.hooks` replaces
while MkDocs builds. :func:`undocumented` lists, in words saying what to add, everything
that has no description: the docs test fails on any.
"""

from __future__ import annotations

from collections.abc import Callable

from docpipe_dev.reference import alerts, chart, cli, http_api, metrics, settings

__all__ = ["render", "undocumented"]

_PAGES: dict[str, Callable[[], str]] = {
    "settings": settings.page,
    "http-api": http_api.page,
    "chart-values": chart.page,
    "metrics": metrics.page,
    "cli": cli.page,
    "exit-codes": cli.exit_codes,
    "alerts": alerts.index,
}


def render(name: str, argument: str | None = None) -> str:
    """The markdown of the generated part ``name`` (``alert`` takes the alert's name)."""
    if name == "alert":
        if argument is None:
            raise ValueError("<!-- reference: alert NAME --> needs the alert's name")
        return alerts.rule(argument)
    if name not in _PAGES:
        raise ValueError(f"no generated reference {name!r} (known: {', '.join(_PAGES)}, alert)")
    return _PAGES[name]()


def undocumented() -> list[str]:
    """Every setting, metric, alert, chart value and CLI option without a description."""
    return [
        *settings.undocumented(),
        *metrics.undocumented(),
        *alerts.undocumented(),
        *chart.undocumented(),
        *cli.undocumented(),
    ]
