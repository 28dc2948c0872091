"""docpipe's Grafana dashboards as code (grafana-foundation-sdk, a development dependency).

``make dashboards`` (``python -m docpipe_dev.dashboards charts/docpipe/dashboards``) writes one
JSON file per dashboard; the chart ships each as a ConfigMap for Grafana's sidecar, and a
test fails when the committed files differ from what this module generates. Another test
runs every query below against a real Prometheus scraping a real stack.

Queries use the metric names of :mod:`docpipe.observability.metrics`. Gauges that beat reads from
Redis and PostgreSQL are wrapped in ``max`` (two beats overlap for a moment during a deploy);
counters and histograms of many processes are summed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from docpipe.observability import metrics as m

__all__ = ["DASHBOARDS", "build", "main", "queries", "render"]

_DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
_RATE = "[$__rate_interval]"
_REF_IDS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass
class _Board:
    """Panels laid out left to right, two per row, each with its id and ref ids set."""

    title: str
    uid: str
    description: str
    builder: dashboard.Dashboard = field(init=False)
    _next_id: int = 1

    def __post_init__(self) -> None:
        self.builder = (
            dashboard.Dashboard(self.title)
            .uid(self.uid)
            .description(self.description)
            .tags(["docpipe"])
            .refresh("30s")
            .time("now-3h", "now")
            .timezone("browser")
            .with_variable(
                dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
            )
        )

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def row(self, title: str) -> _Board:
        self.builder.with_row(dashboard.Row(title).id(self._id()))
        return self

    def graph(self, title: str, unit: str, *queries: Query, description: str = "") -> _Board:
        panel = (
            timeseries.Panel()
            .id(self._id())
            .title(title)
            .description(description)
            .unit(unit)
            .datasource(_DATASOURCE)
            .height(8)
            .span(12)
        )
        self.builder.with_panel(_with_targets(panel, queries))
        return self

    def number(self, title: str, unit: str, *queries: Query, description: str = "") -> _Board:
        panel = (
            stat.Panel()
            .id(self._id())
            .title(title)
            .description(description)
            .unit(unit)
            .datasource(_DATASOURCE)
            .height(5)
            .span(6)
        )
        self.builder.with_panel(_with_targets(panel, queries))
        return self


def _with_targets(panel: Any, queries: Sequence[Query]) -> Any:
    for ref_id, query in zip(_REF_IDS, queries, strict=False):
        panel = panel.with_target(
            prometheus.Dataquery().ref_id(ref_id).expr(query.expr).legend_format(query.legend)
        )
    return panel


def _rate(metric: str, by: str, selector: str = "", scale: str = "") -> str:
    return f"sum by ({by}) (rate({metric}{selector}{_RATE})){scale}"


def _quantile(q: float, histogram: str, by: str) -> Query:
    expr = f"histogram_quantile({q}, sum by (le, {by}) (rate({histogram}_bucket{_RATE})))"
    return Query(expr, f"p{round(q * 100)} {{{{{by}}}}}")


def queue_lag() -> _Board:
    b = _Board(
        "docpipe / Queue lag",
        "docpipe-queue-lag",
        "What waits in the broker and in PostgreSQL, for how long, and how fast it drains.",
    )
    b.row("Broker queues")
    b.graph(
        "Lag: age of the oldest waiting message",
        "s",
        Query(f"max by (queue_name) ({m.QUEUE_LAG})", "{{queue_name}}"),
        description="0 when the queue is empty; grows by 1 s/s when nobody consumes.",
    )
    b.graph(
        "Queue length (incl. priority sub-lists)",
        "short",
        Query(f"max by (queue_name) ({m.QUEUE_LENGTH})", "{{queue_name}}"),
    )
    b.graph(
        "Time waiting in queue, p50 / p95",
        "s",
        _quantile(0.5, m.TASK_QUEUE_WAIT, "queue_name"),
        _quantile(0.95, m.TASK_QUEUE_WAIT, "queue_name"),
        description="From publish (or ETA) to the start of the task.",
    )
    b.graph(
        "Throughput: steps finished per second",
        "ops",
        Query(_rate(m.TASK_SUCCEEDED, "queue_name", '{name="docpipe.run_step"}'), "{{queue_name}}"),
    )
    b.row("Admission")
    b.graph(
        "Batch runs waiting in PostgreSQL for admission",
        "short",
        Query(f"max({m.BATCH_BACKLOG})", "backlog"),
    )
    b.graph(
        "Runs created / ended per minute",
        "short",
        Query(_rate(m.RUNS_CREATED, "lane", scale=" * 60"), "created {{lane}}"),
        Query(_rate(m.RUNS_FINISHED, "lane", scale=" * 60"), "ended {{lane}}"),
    )
    return b


def provider() -> _Board:
    b = _Board(
        "docpipe / Provider",
        "docpipe-provider",
        "Calls to the LLM provider, their errors and 429s, and the shared limiter.",
    )
    b.row("Calls")
    b.graph(
        "Calls per second by outcome",
        "reqps",
        Query(_rate(m.PROVIDER_CALLS, "outcome"), "{{outcome}}"),
    )
    b.graph(
        "Errors per second by kind and status",
        "reqps",
        Query(
            _rate(m.PROVIDER_CALLS, "error_kind, status_code", '{outcome!="ok"}'),
            "{{error_kind}} {{status_code}}",
        ),
    )
    b.graph(
        "429 answers per minute",
        "short",
        Query(_rate(m.PROVIDER_RATE_LIMITED, "lane", scale=" * 60"), "{{lane}}"),
    )
    b.graph(
        "Latency by model, p50 / p95",
        "s",
        _quantile(0.5, m.PROVIDER_CALL_DURATION, "model"),
        _quantile(0.95, m.PROVIDER_CALL_DURATION, "model"),
    )
    b.row("Limiter")
    b.graph(
        "Allowed rate (adaptive) and configured rate",
        "short",
        Query(f"max({m.LIMITER_ALLOWED_RPM})", "allowed rpm"),
        Query(f"max({m.LIMITER_CONFIGURED_RPM})", "configured rpm"),
    )
    b.graph(
        "Calls in flight and waiting for a slot",
        "short",
        Query(f"max({m.LIMITER_IN_FLIGHT})", "in flight"),
        Query(f"max by (lane) ({m.LIMITER_WAITING})", "waiting {{lane}}"),
    )
    b.graph("Wait for the limiter, p95", "s", _quantile(0.95, m.LIMITER_WAIT, "lane"))
    b.graph(
        "Step retries per minute",
        "short",
        Query(_rate(m.STEP_RETRIES, "step", scale=" * 60"), "{{step}}"),
    )
    return b


# A deployment whose batches never asked for the provider-batch lane has none of its series:
# its panels show 0 rather than "no data".
_NONE_YET = " or vector(0)"


def cost() -> _Board:
    b = _Board("docpipe / Cost", "docpipe-cost", "What the provider costs, in USD.")
    b.number(
        "Spent in the time range", "currencyUSD", Query(f"sum(increase({m.COST_USD}[$__range]))")
    )
    b.number(
        "Cost per finished document, last hour",
        "currencyUSD",
        Query(f'sum(rate({m.COST_USD}[1h])) / sum(rate({m.RUNS_FINISHED}{{status="done"}}[1h]))'),
        description="Everything spent (failed runs too) per run that ended done.",
    )
    b.row("USD per hour")
    b.graph(
        "By pipeline",
        "currencyUSD",
        Query(_rate(m.COST_USD, "pipeline", scale=" * 3600"), "{{pipeline}}"),
    )
    b.graph(
        "By tenant",
        "currencyUSD",
        Query(_rate(m.COST_USD, "tenant", scale=" * 3600"), "{{tenant}}"),
    )
    b.graph(
        "By model", "currencyUSD", Query(_rate(m.COST_USD, "model", scale=" * 3600"), "{{model}}")
    )
    b.graph(
        "Cost per finished document by pipeline (1 h window)",
        "currencyUSD",
        Query(
            f"sum by (pipeline) (rate({m.COST_USD}[1h])) / sum by (pipeline) "
            f'(rate({m.RUNS_FINISHED}{{status="done"}}[1h]))',
            "{{pipeline}}",
        ),
    )
    b.row("Provider batches")
    b.graph(
        "Saved by provider batches, USD per hour",
        "currencyUSD",
        Query(
            _rate(m.PROVIDER_BATCH_SAVED_USD, "pipeline", scale=" * 3600") + _NONE_YET,
            "{{pipeline}}",
        ),
        description="What answers from provider batches cost less than in real time.",
    )
    b.graph(
        "Calls waiting for a provider batch",
        "short",
        Query(
            f"sum by (model, state) ({m.PROVIDER_BATCH_CALLS_WAITING}){_NONE_YET}",
            "{{model}} {{state}}",
        ),
        description="waiting: not yet packed; packed: in a provider batch the provider has.",
    )
    b.graph(
        "Oldest wait for a provider batch",
        "s",
        Query(f"max by (model) ({m.PROVIDER_BATCH_OLDEST_WAIT}){_NONE_YET}", "{{model}}"),
        description="Past the provider's completion window, DocpipeProviderBatchPastWindow fires.",
    )
    b.graph(
        "Provider batches by state",
        "short",
        Query(f"sum by (state) ({m.PROVIDER_BATCHES}){_NONE_YET}", "{{state}}"),
    )
    return b


def health() -> _Board:
    b = _Board(
        "docpipe / Health",
        "docpipe-health",
        "Workers, beat, the outbox, recovery and runs that need a human.",
    )
    b.number("Workers up", "short", Query(f"sum({m.WORKER_UP})"))
    b.number("Beat: seconds since the last tick", "s", Query(f"time() - max({m.BEAT_LAST_TICK})"))
    b.number("Oldest due outbox row", "s", Query(f"max({m.OUTBOX_OLDEST_AGE})"))
    b.number(
        "Runs needing review",
        "short",
        Query(f'sum(max by (lane) ({m.RUNS}{{status="needs_review"}}))'),
    )
    b.row("Processes")
    b.graph(
        "Slots per queue",
        "short",
        Query(f"sum by (queue_name) ({m.WORKER_CONCURRENCY})", "{{queue_name}}"),
    )
    b.graph(
        "Tasks running",
        "short",
        Query(f"sum by (hostname) ({m.WORKER_TASKS_ACTIVE})", "{{hostname}}"),
    )
    b.graph(
        "Slots in use and free, per worker",
        "short",
        Query(f"max by (hostname) ({m.WORKER_SLOTS_IN_USE})", "{{hostname}} in use"),
        Query(f"max by (hostname) ({m.WORKER_SLOTS_FREE})", "{{hostname}} free"),
        description=(
            "A worker's slots are its pool processes (prefork) or its threads (threads pool). "
            "In use at their number for long: the pool is too small for what waits in its "
            "queue."
        ),
    )
    b.graph(
        "Oldest step in flight, per worker",
        "s",
        Query(f"max by (hostname) ({m.WORKER_OLDEST_STEP_AGE})", "{{hostname}}"),
        description=(
            "How long each worker's oldest running step has run. Past the hard time limit "
            "it is a step stuck: a threads worker gives it up and restarts."
        ),
    )
    b.graph(
        "Periodic jobs: seconds since the last run",
        "s",
        Query(f"time() - max by (job) ({m.PERIODIC_LAST_FINISHED})", "{{job}}"),
    )
    b.graph(
        "Metric sources answering (Redis, PostgreSQL)",
        "short",
        Query(f"min by (source) ({m.STATE_COLLECTOR_UP})", "{{source}}"),
    )
    b.row("Work that needs attention")
    b.graph(
        "Outbox: due rows and the oldest one's age",
        "short",
        Query(f"max({m.OUTBOX_BACKLOG})", "due rows"),
        Query(f"max({m.OUTBOX_OLDEST_AGE})", "oldest, s"),
    )
    b.graph(
        "Reaper recoveries per minute",
        "short",
        Query(_rate(m.REAPER_RECOVERIES, "kind", scale=" * 60"), "{{kind}}"),
    )
    b.graph(
        "Runs by status",
        "short",
        Query(
            f"sum by (status) (max by (status, lane) ({m.RUNS}))"
            f" or sum by (status) (max by (status, lane) ({m.RUNS_ENDED_ESTIMATE}))",
            "{{status}}",
        ),
    )
    b.graph(
        "Runs ended badly per minute",
        "short",
        Query(
            _rate(
                m.RUNS_FINISHED,
                "status",
                '{status=~"failed|needs_review|budget_exceeded|expired"}',
                " * 60",
            ),
            "{{status}}",
        ),
    )
    b.row("The review queue")
    # Beat exports a backlog series per tenant and pipeline while runs wait; none wait: 0.
    b.graph(
        "Runs awaiting a person, by pipeline",
        "short",
        Query(
            f"sum by (pipeline) (max by (tenant, pipeline) ({m.REVIEW_BACKLOG})) or on() vector(0)",
            "{{pipeline}}",
        ),
    )
    b.graph(
        "Oldest review's wait, and the limit",
        "s",
        Query(f"max by (pipeline) ({m.REVIEW_OLDEST_AGE}) or on() vector(0)", "{{pipeline}}"),
        Query(f"max({m.REVIEW_MAX_WAIT})", "DOCPIPE_REVIEW_MAX_WAIT_S"),
        description="DocpipeReviewWaitTooLong fires when a line passes the limit for 5 minutes.",
    )
    b.graph(
        "Review decisions per hour, by action",
        "short",
        Query(
            f"sum by (action) (increase({m.REVIEW_DECISIONS}[1h]))",
            "{{action}}",
        ),
    )
    return b


DASHBOARDS = {
    "queue-lag.json": queue_lag,
    "provider.json": provider,
    "cost.json": cost,
    "health.json": health,
}


def build() -> dict[str, dict[str, Any]]:
    """File name -> dashboard model (JSON-compatible)."""
    built: dict[str, dict[str, Any]] = json.loads(render_all())
    return built


def render_all() -> str:
    boards = {name: make().builder.build() for name, make in DASHBOARDS.items()}
    return json.dumps(boards, cls=JSONEncoder, sort_keys=True)


def render(name: str) -> str:
    """The file content of dashboard ``name``, byte for byte."""
    return json.dumps(build()[name], indent=2, sort_keys=True) + "\n"


def queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (panel title, PromQL expression) of a dashboard model."""
    return [
        (panel["title"], target["expr"])
        for panel in model["panels"]
        for target in panel.get("targets", [])
    ]


def main(argv: Sequence[str] = sys.argv[1:]) -> int:
    out = Path(argv[0] if argv else "charts/docpipe/dashboards")
    out.mkdir(parents=True, exist_ok=True)
    for name in DASHBOARDS:
        (out / name).write_text(render(name), encoding="utf-8")
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
