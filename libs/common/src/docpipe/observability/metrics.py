"""Prometheus metrics of every docpipe process, correct under Celery's prefork pool.

Where a figure is measured
--------------------------
- **Where it happens** (counters, histograms): the API counts requests, publishes and new
  runs; a worker's pool processes count task runs, queue wait, steps, provider calls, cost,
  retries and recoveries. Series of several processes and replicas add up with ``sum``.
- **From Redis and PostgreSQL at scrape time** (queue length and lag, runs by status,
  batch and outbox backlog, limiter state, periodic jobs): by beat alone, see
  :mod:`docpipe.worker.state_collector`. Beat is a singleton, so each such series exists once and
  Redis/PostgreSQL are asked once per scrape, not once per worker; dashboards still wrap
  them in ``max`` so that the brief overlap of two beats during a deploy shows no double.

Names follow celery-exporter where it has the same figure (``celery_queue_length{queue_name}``,
``celery_task_runtime``, ``celery_worker_up{hostname}``...), so its community dashboards keep
working; the rest are ``docpipe_*``. Every name is a constant here, used by the dashboards.

Prefork
-------
A worker's pool processes are forks of its main process; in prometheus_client's multiprocess
mode each writes its values to files in ``PROMETHEUS_MULTIPROC_DIR`` and the main process
serves the sum. The mode is fixed when a metric object is created, so docpipe creates its
metrics lazily (first use, :func:`metrics`) and the worker's main process calls
:func:`use_multiprocess_dir` before its pool forks (see :mod:`docpipe.observability.multiprocess`).
The API and beat are single processes and keep their values in memory, unless the operator
sets ``PROMETHEUS_MULTIPROC_DIR`` for them (e.g. uvicorn with several workers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from docpipe.observability import multiprocess
from docpipe.pipelines.catalog import pipelines
from docpipe.statuses import ENDED_RUN_STATUSES, DecisionAction, Lane

__all__ = [
    "SCRAPED_GAUGES",
    "Metrics",
    "ScrapedGauge",
    "count_expired_reviews",
    "count_model_choice",
    "count_recoveries",
    "count_review_decision",
    "exposition_registry",
    "mark_beat_tick",
    "metrics",
    "observe_limiter_wait",
    "observe_provider_call",
    "observe_step",
    "scraped_gauge",
    "serve_metrics",
    "use_multiprocess_dir",
]

log = logging.getLogger(__name__)

# Metric names (without the ``_total``/``_bucket`` suffixes Prometheus adds).
TASK_SENT = "celery_task_sent_total"
TASK_STARTED = "celery_task_started_total"
TASK_SUCCEEDED = "celery_task_succeeded_total"
TASK_FAILED = "celery_task_failed_total"
TASK_RETRIED = "celery_task_retried_total"
TASK_RUNTIME = "celery_task_runtime"
TASK_QUEUE_WAIT = "celery_task_queue_wait_time"
WORKER_UP = "celery_worker_up"
WORKER_TASKS_ACTIVE = "celery_worker_tasks_active"
WORKER_CONCURRENCY = "docpipe_worker_concurrency"
STEP_DURATION = "docpipe_step_duration_seconds"
STEP_RETRIES = "docpipe_step_retries_total"
RUNS_CREATED = "docpipe_runs_created_total"
RUNS_FINISHED = "docpipe_runs_finished_total"
PROVIDER_CALLS = "docpipe_provider_calls_total"
PROVIDER_CALL_DURATION = "docpipe_provider_call_duration_seconds"
PROVIDER_RATE_LIMITED = "docpipe_provider_rate_limited_total"
MODEL_CHOICES = "docpipe_model_choices_total"
LIMITER_WAIT = "docpipe_limiter_wait_seconds"
COST_USD = "docpipe_cost_usd_total"
PROVIDER_BATCH_SAVED_USD = "docpipe_provider_batch_saved_usd_total"
REAPER_RECOVERIES = "docpipe_reaper_recoveries_total"
OUTBOX_SWEPT = "docpipe_outbox_swept_total"
HTTP_REQUEST_DURATION = "docpipe_http_request_duration_seconds"
BEAT_LAST_TICK = "docpipe_beat_last_tick_timestamp_seconds"
REVIEW_DECISIONS = "docpipe_review_decisions_total"
REVIEWS_EXPIRED = "docpipe_reviews_expired_total"
# Served by beat from Redis and PostgreSQL (docpipe.worker.state_collector).
QUEUE_LENGTH = "celery_queue_length"
QUEUE_LAG = "docpipe_queue_lag_seconds"
RUNS = "docpipe_runs"
RUNS_ENDED_ESTIMATE = "docpipe_runs_ended_estimate"
BATCH_BACKLOG = "docpipe_batch_backlog_runs"
OUTBOX_BACKLOG = "docpipe_outbox_backlog"
OUTBOX_PARKED = "docpipe_outbox_parked"
OUTBOX_OLDEST_AGE = "docpipe_outbox_oldest_age_seconds"
LIMITER_ALLOWED_RPM = "docpipe_limiter_allowed_rpm"
LIMITER_CONFIGURED_RPM = "docpipe_limiter_configured_rpm"
LIMITER_IN_FLIGHT = "docpipe_limiter_in_flight"
LIMITER_WAITING = "docpipe_limiter_waiting_calls"
LIMITER_ALLOWED_TPM = "docpipe_limiter_allowed_tpm"
LIMITER_CONFIGURED_TPM = "docpipe_limiter_configured_tpm"
PERIODIC_LAST_FINISHED = "docpipe_periodic_job_last_finished_timestamp_seconds"
REVIEW_BACKLOG = "docpipe_review_backlog_runs"
EVALUATION_ACCURACY = "docpipe_evaluation_accuracy"
REVIEW_OLDEST_AGE = "docpipe_review_oldest_age_seconds"
REVIEW_MAX_WAIT = "docpipe_review_max_wait_seconds"
STATE_COLLECTOR_UP = "docpipe_state_collector_up"
PROVIDER_BATCHES = "docpipe_provider_batches"
PROVIDER_BATCH_CALLS_WAITING = "docpipe_provider_batch_calls_waiting"
PROVIDER_BATCH_OLDEST_WAIT = "docpipe_provider_batch_oldest_wait_seconds"
# Served by each worker from its own pool (docpipe.worker.slot_collector).
WORKER_SLOTS = "docpipe_worker_slots"
WORKER_SLOTS_IN_USE = "docpipe_worker_slots_in_use"
WORKER_SLOTS_FREE = "docpipe_worker_slots_free"
WORKER_OLDEST_STEP_AGE = "docpipe_worker_oldest_step_age_seconds"


@dataclass(frozen=True)
class ScrapedGauge:
    """A gauge read at scrape time (by beat from Redis or PostgreSQL, by a worker from its
    own pool): its help and labels are declared here, beside the metrics recorded where
    things happen, so that every figure docpipe serves is described in one module (and in
    the docs' metrics reference)."""

    name: str
    documentation: str
    labels: tuple[str, ...] = ()
    served_by: str = "beat"  # or "worker"


SCRAPED_GAUGES = {
    gauge.name: gauge
    for gauge in (
        ScrapedGauge(QUEUE_LENGTH, "Messages waiting, incl. priority sub-lists", ("queue_name",)),
        ScrapedGauge(QUEUE_LAG, "Age of the oldest waiting message, seconds", ("queue_name",)),
        ScrapedGauge(
            RUNS, "Runs in flight or awaiting a person, by status and lane", ("status", "lane")
        ),
        ScrapedGauge(
            RUNS_ENDED_ESTIMATE,
            "Ended runs by status and lane, estimated from the table's statistics (ANALYZE)",
            ("status", "lane"),
        ),
        ScrapedGauge(BATCH_BACKLOG, "Batch runs awaiting admission"),
        ScrapedGauge(OUTBOX_BACKLOG, "Outbox rows due, unpublished"),
        ScrapedGauge(OUTBOX_PARKED, "Outbox rows parked for later"),
        ScrapedGauge(OUTBOX_OLDEST_AGE, "Oldest due outbox row, seconds"),
        ScrapedGauge(LIMITER_ALLOWED_RPM, "Requests/minute allowed now", ("provider", "model")),
        ScrapedGauge(
            LIMITER_CONFIGURED_RPM,
            "Requests/minute configured, or stated by the provider",
            ("provider", "model"),
        ),
        ScrapedGauge(LIMITER_ALLOWED_TPM, "Tokens/minute allowed now", ("provider", "model")),
        ScrapedGauge(
            LIMITER_CONFIGURED_TPM,
            "Tokens/minute configured, or stated by the provider",
            ("provider", "model"),
        ),
        ScrapedGauge(LIMITER_IN_FLIGHT, "Calls holding a limiter slot", ("provider",)),
        ScrapedGauge(
            LIMITER_WAITING, "Calls waiting for the provider limiter", ("provider", "lane")
        ),
        ScrapedGauge(PERIODIC_LAST_FINISHED, "Unix time a periodic job last finished", ("job",)),
        ScrapedGauge(STATE_COLLECTOR_UP, "1 if the source answered this scrape", ("source",)),
        ScrapedGauge(REVIEW_BACKLOG, "Runs awaiting a person", ("tenant", "pipeline")),
        ScrapedGauge(
            PROVIDER_BATCHES,
            "Provider batches open (packing, submitted) or ended in the last day, by state",
            ("provider", "state"),
        ),
        ScrapedGauge(
            PROVIDER_BATCH_CALLS_WAITING,
            "Calls waiting for a provider batch (waiting: not yet packed; packed: sent)",
            ("provider", "model", "state"),
        ),
        ScrapedGauge(
            PROVIDER_BATCH_OLDEST_WAIT,
            "How long the oldest call waiting for a provider batch has waited, seconds",
            ("provider", "model"),
        ),
        ScrapedGauge(
            REVIEW_OLDEST_AGE,
            "How long the oldest run awaiting a person has waited, seconds",
            ("tenant", "pipeline"),
        ),
        ScrapedGauge(
            REVIEW_MAX_WAIT, "DOCPIPE_REVIEW_MAX_WAIT_S: the longest a run should await a person"
        ),
        ScrapedGauge(
            WORKER_SLOTS,
            "Tasks the worker runs at once: its processes (prefork) or threads (threads)",
            ("hostname", "pool"),
            served_by="worker",
        ),
        ScrapedGauge(
            WORKER_SLOTS_IN_USE, "Slots running a task now", ("hostname",), served_by="worker"
        ),
        ScrapedGauge(
            WORKER_SLOTS_FREE, "Slots free for the next message", ("hostname",), served_by="worker"
        ),
        ScrapedGauge(
            WORKER_OLDEST_STEP_AGE,
            "How long the worker's oldest step in flight has run, seconds (0: none)",
            ("hostname",),
            served_by="worker",
        ),
        ScrapedGauge(
            EVALUATION_ACCURACY,
            "Overall accuracy (0-1) of the latest reported evaluation of a pipeline version on "
            "an evaluation set",
            ("tenant", "set", "pipeline", "step"),
        ),
    )
}


def scraped_gauge(name: str, value: float | None = None) -> GaugeMetricFamily:
    """An empty family of the scraped gauge ``name`` (labelled), or one without labels
    holding ``value``."""
    gauge = SCRAPED_GAUGES[name]
    if value is not None:
        return GaugeMetricFamily(name, gauge.documentation, value=value)
    return GaugeMetricFamily(name, gauge.documentation, labels=list(gauge.labels))


RECOVERY_KINDS = (
    "expired_leases",
    "lost_messages",
    "expired_runs",
    "interrupted_webhooks",
    "lost_webhooks",
)

_TASK_LABELS = ("name", "hostname", "queue_name")
# Seconds, from a fast local call to the hour a message may wait in a batch backlog.
_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600)
_WORK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 120)
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    """Every metric a docpipe process records; one instance per process (:func:`metrics`)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:

        def _counter(name: str, doc: str, labels: Iterable[str]) -> Counter:
            return Counter(name.removesuffix("_total"), doc, list(labels), registry=registry)

        self.task_sent = _counter(TASK_SENT, "Task messages published", _TASK_LABELS)
        self.task_started = _counter(TASK_STARTED, "Tasks started", _TASK_LABELS)
        self.task_succeeded = _counter(TASK_SUCCEEDED, "Tasks that returned", _TASK_LABELS)
        self.task_failed = _counter(TASK_FAILED, "Tasks that raised", (*_TASK_LABELS, "exception"))
        self.task_retried = _counter(TASK_RETRIED, "Tasks sent back for a retry", _TASK_LABELS)
        self.task_runtime = Histogram(
            TASK_RUNTIME,
            "Task run time, seconds",
            _TASK_LABELS,
            buckets=_WORK_BUCKETS,
            registry=registry,
        )
        self.task_queue_wait = Histogram(
            TASK_QUEUE_WAIT,
            "Seconds from publish (or ETA) to start, from the message's docpipe_enqueued_at",
            _TASK_LABELS,
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.worker_up = Gauge(
            WORKER_UP,
            "1 while the worker consumes",
            ["hostname"],
            multiprocess_mode="livemax",
            registry=registry,
        )
        self.worker_tasks_active = Gauge(
            WORKER_TASKS_ACTIVE,
            "Tasks running now",
            ["hostname"],
            multiprocess_mode="livesum",
            registry=registry,
        )
        self.worker_concurrency = Gauge(
            WORKER_CONCURRENCY,
            "Slots (pool processes, or a threads pool's threads) consuming this queue",
            ["hostname", "queue_name"],
            multiprocess_mode="livemax",
            registry=registry,
        )
        self.step_duration = Histogram(
            STEP_DURATION,
            "A claimed step from claim to outcome, seconds",
            ["pipeline", "step", "outcome"],
            buckets=_WORK_BUCKETS,
            registry=registry,
        )
        self.step_retries = _counter(
            STEP_RETRIES, "Steps handed back for a retry", ("pipeline", "step")
        )
        self.runs_created = _counter(RUNS_CREATED, "Runs created", ("pipeline", "lane"))
        self.runs_finished = _counter(
            RUNS_FINISHED, "Runs ended by a worker, by final status", ("pipeline", "lane", "status")
        )
        self.provider_calls = _counter(
            PROVIDER_CALLS,
            "Provider calls by outcome, HTTP status and error kind",
            ("model", "outcome", "status_code", "error_kind"),
        )
        self.provider_call_duration = Histogram(
            PROVIDER_CALL_DURATION,
            "Provider call latency, seconds",
            ["model", "outcome"],
            buckets=_WORK_BUCKETS,
            registry=registry,
        )
        self.provider_rate_limited = _counter(PROVIDER_RATE_LIMITED, "429 answers", ("lane",))
        self.model_choices = _counter(
            MODEL_CHOICES, "Calls routed to a model, by the reason why", ("model", "reason")
        )
        self.limiter_wait = Histogram(
            LIMITER_WAIT,
            "Seconds a call waited for the limiter",
            ["lane"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.cost_usd = _counter(COST_USD, "Provider cost, USD", ("pipeline", "tenant", "model"))
        self.provider_batch_saved_usd = _counter(
            PROVIDER_BATCH_SAVED_USD,
            "What answers from provider batches saved against real-time prices, USD",
            ("pipeline", "tenant", "model"),
        )
        self.reaper_recoveries = _counter(REAPER_RECOVERIES, "Work the reaper recovered", ("kind",))
        self.outbox_swept = _counter(OUTBOX_SWEPT, "Outbox rows the sweep had to publish", ())
        self.http_request_duration = Histogram(
            HTTP_REQUEST_DURATION,
            "API requests, seconds",
            ["method", "route", "status_code"],
            buckets=_HTTP_BUCKETS,
            registry=registry,
        )
        self.beat_last_tick = Gauge(
            BEAT_LAST_TICK,
            "Unix time of beat's last scheduler tick",
            multiprocess_mode="livemax",
            registry=registry,
        )
        self.review_decisions = _counter(
            REVIEW_DECISIONS, "Reviewers' decisions recorded", ("pipeline", "action")
        )
        self.reviews_expired = _counter(
            REVIEWS_EXPIRED,
            "Runs awaiting a person ended as expired (DOCPIPE_REVIEW_EXPIRE_AFTER_S)",
            ("pipeline",),
        )
        self._initialise_known_series()

    def _initialise_known_series(self) -> None:
        # A counter series born at its first increment loses that increment in rate() and
        # increase(); series whose labels are known up front start at 0 instead.
        for pipeline in pipelines():
            for lane in Lane:
                self.runs_created.labels(pipeline, lane)
                for status in ENDED_RUN_STATUSES:
                    self.runs_finished.labels(pipeline, lane, status)
        for lane in Lane:
            self.provider_rate_limited.labels(lane)
        for kind in RECOVERY_KINDS:
            self.reaper_recoveries.labels(kind)
        for pipeline in pipelines():
            for action in DecisionAction:
                self.review_decisions.labels(pipeline, action)
            self.reviews_expired.labels(pipeline)


_created: Metrics | None = None
_creating = threading.Lock()


def metrics() -> Metrics:
    """This process' metrics, created on first use (see the module docstring on prefork);
    the first use may come from several threads at once (a step's parallel calls)."""
    global _created
    if _created is None:
        with _creating:
            if _created is None:
                _created = Metrics()
    return _created


def observe_step(
    pipeline: str, step: str, lane: str, outcome: str, run_status: str | None, seconds: float
) -> None:
    m = metrics()
    m.step_duration.labels(pipeline, step, outcome).observe(seconds)
    if outcome in ("retry", "parked"):  # tried again after a countdown, or parked
        m.step_retries.labels(pipeline, step).inc()
    if run_status in ENDED_RUN_STATUSES:
        m.runs_finished.labels(pipeline, lane, run_status).inc()


def observe_provider_call(
    *,
    pipeline: str,
    tenant: str,
    lane: str,
    model: str,
    outcome: str,
    http_status: int | None,
    error_kind: str | None,
    latency_s: float,
    cost_usd: Decimal,
) -> None:
    m = metrics()
    status_code = str(http_status) if http_status else "none"
    m.provider_calls.labels(model, outcome, status_code, error_kind or "none").inc()
    m.provider_call_duration.labels(model, outcome).observe(latency_s)
    if http_status == 429:
        m.provider_rate_limited.labels(lane).inc()
    if cost_usd:
        m.cost_usd.labels(pipeline, tenant, model).inc(float(cost_usd))


def count_provider_batch_saving(
    *, pipeline: str, tenant: str, model: str, saved_usd: Decimal
) -> None:
    """An answer from a provider batch cost ``saved_usd`` less than in real time."""
    if saved_usd > 0:
        metrics().provider_batch_saved_usd.labels(pipeline, tenant, model).inc(float(saved_usd))


def count_model_choice(model: str, reason: str) -> None:
    """The router sent a call to ``model`` for ``reason`` (docpipe.providers.routing)."""
    metrics().model_choices.labels(model, reason).inc()


def observe_limiter_wait(lane: str, seconds: float) -> None:
    metrics().limiter_wait.labels(lane).observe(seconds)


def count_recoveries(recovered: Mapping[str, int]) -> None:
    """One reaper pass: ``{"expired_leases": n, "lost_messages": n, "expired_runs": n}``."""
    counter = metrics().reaper_recoveries
    for kind, count in recovered.items():
        if count:
            counter.labels(kind).inc(count)


def count_expired_reviews(expired: Mapping[str, int]) -> None:
    """Beat's retention pass ended these many runs awaiting a person, per pipeline."""
    for pipeline, count in expired.items():
        metrics().reviews_expired.labels(pipeline).inc(count)


def count_review_decision(pipeline: str, action: str) -> None:
    """A reviewer's decision was recorded (committed) for a run of ``pipeline``."""
    metrics().review_decisions.labels(pipeline, action).inc()


def mark_beat_tick() -> None:
    metrics().beat_last_tick.set(time.time())


def use_multiprocess_dir() -> Path:
    """Put this process and the processes it forks into multiprocess mode (the worker's
    main process, before its pool starts); see :mod:`docpipe.observability.multiprocess`."""
    if _created is not None:
        raise RuntimeError("docpipe's metrics were created before multiprocess mode was chosen")
    return multiprocess.prepare()


class _ProxyCollector(Collector):
    """Serves another registry's metrics from a registry of its own."""

    def __init__(self, source: CollectorRegistry) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        yield from self._source.collect()


def exposition_registry(*extra: Collector) -> CollectorRegistry:
    """What this process serves at /metrics: its own metrics (summed over the pool in
    multiprocess mode) plus ``extra`` collectors."""
    registry = CollectorRegistry(auto_describe=False)
    path = multiprocess.multiprocess_dir()
    pool = multiprocess.PoolCollector(path) if path else _ProxyCollector(REGISTRY)
    registry.register(pool)
    for collector in extra:
        registry.register(collector)
    return registry


def serve_metrics(port: int, host: str, registry: CollectorRegistry) -> WSGIServer | None:
    """Serve ``registry`` at http://host:port/metrics from a daemon thread; port 0: off.
    Returns the server (``shutdown()`` stops it), or None when off.

    A port already taken is logged, not raised: metrics are not worth refusing work for.
    """
    if not port:
        return None
    try:
        server, _ = _start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("cannot serve metrics on %s:%d: %s", host, port, exc)
        return None
    log.info("metrics at http://%s:%d/metrics", host, port)
    return server
