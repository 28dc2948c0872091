"""The metrics reference: every metric docpipe serves with its type, labels and meaning,
from ``docpipe.observability.metrics`` (the metrics recorded where things happen, and the
gauges beat reads from Redis and PostgreSQL at scrape time)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from docpipe.observability import metrics as m
from docpipe_dev.reference.markdown import cell, code, table

__all__ = ["Metric", "page", "recorded", "scraped", "undocumented"]

_NAME = re.compile(r"^(docpipe|celery)_[a-z0-9_]+$")


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str
    labels: tuple[str, ...]
    documentation: str


def recorded() -> list[Metric]:
    """The metrics every process records where things happen (``Metrics``)."""
    found = []
    for attribute in vars(m.Metrics(CollectorRegistry())).values():
        if isinstance(attribute, MetricWrapperBase):
            kind = str(attribute._type)
            name = attribute._name + ("_total" if kind == "counter" else "")
            found.append(Metric(name, kind, tuple(attribute._labelnames), attribute._documentation))
    return found


def scraped(served_by: str | None = None) -> list[Metric]:
    """The gauges read when Prometheus scrapes: by beat from Redis and PostgreSQL, by each
    worker from its pool (``served_by``; None: all)."""
    return [
        Metric(g.name, "gauge", g.labels, g.documentation)
        for g in m.SCRAPED_GAUGES.values()
        if served_by in (None, g.served_by)
    ]


def undocumented() -> list[str]:
    """Metric names of the metrics module that nothing serves with a description."""
    served = {metric.name: metric for metric in recorded() + scraped()}
    names = {
        value
        for key, value in vars(m).items()
        if key.isupper() and isinstance(value, str) and _NAME.match(value)
    }
    missing = [
        f"metric {name} is named in docpipe/observability/metrics.py but neither Metrics nor "
        "SCRAPED_GAUGES declares it: create it in Metrics.__init__, or add a ScrapedGauge"
        for name in sorted(names - served.keys())
    ]
    missing += [
        f"metric {metric.name} has no help text: give it one where it is declared in "
        "docpipe/observability/metrics.py"
        for metric in served.values()
        if not metric.documentation.strip()
    ]
    return missing


def page() -> str:
    def rows(metrics: list[Metric]) -> list[list[str]]:
        return [
            [
                code(x.name),
                x.kind,
                ", ".join(code(label) for label in x.labels),
                cell(x.documentation),
            ]
            for x in sorted(metrics, key=lambda x: x.name)
        ]

    headers = ["metric", "type", "labels", "what it measures"]
    return (
        "## Recorded where it happens\n\n"
        "Counters and histograms of the API and the workers (pool processes summed by the "
        "worker's main process): add series of several processes with `sum`.\n\n"
        + table(headers, rows(recorded()))
        + "\n## Read by beat at scrape time\n\n"
        "Gauges of what Redis and PostgreSQL hold, served by beat alone (one series each); "
        "wrap them in `max` for the moment two beats overlap during a deploy.\n\n"
        + table(headers, rows(scraped("beat")))
        + "\n## Read by each worker at scrape time\n\n"
        "Gauges of a worker's own pool, served by its main process (one series per worker); "
        "a pool's slots are its processes (prefork) or its threads (threads), see "
        "[worker pools](../concepts/worker-pools.md).\n\n" + table(headers, rows(scraped("worker")))
    )
