"""Read a /metrics endpoint the way Prometheus does (prometheus_client's own parser)."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """Every sample at ``url``: (sample name, labels) -> value."""
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def total(samples: Samples, metric: str, /, **labels: str) -> float:
    """The sum of the samples called ``metric`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == metric and wanted <= ls)


def series(samples: Samples, metric: str) -> list[dict[str, str]]:
    return [dict(ls) for (n, ls) in samples if n == metric]
