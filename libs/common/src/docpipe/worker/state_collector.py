"""Gauges read from Redis and PostgreSQL when Prometheus scrapes: served by beat only.

What waits in the broker (length per queue, counting kombu's priority sub-lists, and the
lag: age of the oldest waiting message), what the shared provider limiter allows and who
waits for it, runs in flight and awaiting a person by status (counted) and ended runs by
status (estimated from the table's statistics: counting them would read the history),
batch runs still waiting in PostgreSQL for admission, the outbox backlog and its oldest
row's age, the review backlog per tenant and pipeline (runs awaiting a person, and how long
the oldest has waited, beside DOCPIPE_REVIEW_MAX_WAIT_S for the alert to compare with), and
when each periodic job last finished. Every query reads what is in flight or waiting, never
the history (docpipe.state.query_paths: PERIODIC).

Beat is a singleton, so each series exists once however many workers run (computed in every
worker, the same figure would appear once per worker and Redis/PostgreSQL would be asked as
often). A source that does not answer leaves its gauges out of that scrape and sets
``docpipe_state_collector_up{source}`` to 0, so a dashboard shows a gap, never a stale value.
Answers are reused for ``min_interval_s``, so several Prometheus replicas cost one query.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import psycopg
import redis
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from psycopg.rows import dict_row

from docpipe.broker.queues import QUEUES, queue_state
from docpipe.observability import metrics as m
from docpipe.providers.limiter import ProviderLimiter
from docpipe.settings import Settings
from docpipe.state.db import Row, Session
from docpipe.statuses import Lane, RunStatus

__all__ = ["StateCollector"]

log = logging.getLogger(__name__)

_TIMEOUT_S = 3
# The statuses docpipe_runs counts; the others (ended) are docpipe_runs_ended_estimate.
COUNTED_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.NEEDS_REVIEW)


class StateCollector(Collector):
    """A prometheus_client collector over Redis and PostgreSQL (one connection each)."""

    def __init__(self, settings: Settings, *, min_interval_s: float = 1.0) -> None:
        self._settings = settings
        self._min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._redis: redis.Redis | None = None
        self._limiter: ProviderLimiter | None = None
        self._conn: psycopg.Connection[Row] | None = None
        self._cached: tuple[float, list[Metric]] | None = None

    def describe(self) -> list[Metric]:
        return []  # collected on demand only: registering must not touch Redis or PostgreSQL

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self._min_interval_s:
                self._cached = (now, self._read())
            families = self._cached[1]
        yield from families

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            if self._redis is not None:
                self._redis.close()

    def _read(self) -> list[Metric]:
        up = m.scraped_gauge(m.STATE_COLLECTOR_UP)
        families: list[Metric] = [up]
        for source, read in (("redis", self._read_redis), ("postgres", self._read_postgres)):
            try:
                families += read()
            except (redis.RedisError, psycopg.Error, OSError) as exc:
                log.warning("metrics: %s did not answer: %s", source, exc)
                self._forget(source)
                up.add_metric([source], 0)
            else:
                up.add_metric([source], 1)
        return families

    def _forget(self, source: str) -> None:
        if source == "postgres" and self._conn is not None:
            self._conn.close()
            self._conn = None

    def _read_redis(self) -> list[Metric]:
        if self._redis is None:
            self._redis = redis.Redis.from_url(
                self._settings.redis_url,
                socket_connect_timeout=_TIMEOUT_S,
                socket_timeout=_TIMEOUT_S,
            )
            self._limiter = ProviderLimiter(self._redis, self._settings)
        assert self._limiter is not None
        length = m.scraped_gauge(m.QUEUE_LENGTH)
        lag = m.scraped_gauge(m.QUEUE_LAG)
        now = time.time()
        for queue in QUEUES:
            state = queue_state(self._redis, queue)
            length.add_metric([queue], state.length)
            lag.add_metric([queue], state.lag_s(now))
        limiter = self._limiter
        waiting = m.scraped_gauge(m.LIMITER_WAITING)
        in_flight = m.scraped_gauge(m.LIMITER_IN_FLIGHT)
        for provider in limiter.providers():
            held = limiter.state(provider)
            waiting.add_metric([provider, Lane.INTERACTIVE], held.waiting_interactive)
            waiting.add_metric([provider, Lane.BATCH], held.waiting_batch)
            in_flight.add_metric([provider], held.in_flight)
        families = {
            ("requests", "allowed"): m.scraped_gauge(m.LIMITER_ALLOWED_RPM),
            ("requests", "limit"): m.scraped_gauge(m.LIMITER_CONFIGURED_RPM),
            ("tokens", "allowed"): m.scraped_gauge(m.LIMITER_ALLOWED_TPM),
            ("tokens", "limit"): m.scraped_gauge(m.LIMITER_CONFIGURED_TPM),
        }
        for bucket in limiter.bucket_states():
            labels = [bucket.provider, bucket.model]
            families[bucket.kind, "allowed"].add_metric(labels, bucket.allowed_per_min)
            families[bucket.kind, "limit"].add_metric(labels, bucket.limit_per_min)
        return [length, lag, *families.values(), in_flight, waiting]

    def _read_postgres(self) -> list[Metric]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._settings.database_url,
                autocommit=True,
                row_factory=dict_row,
                connect_timeout=_TIMEOUT_S,
                # The gauges read a few thousand index entries at most: parallel workers
                # would cost more to start than they save, and a scrape takes none of them.
                options=(
                    f"-c statement_timeout={_TIMEOUT_S * 1000} -c max_parallel_workers_per_gather=0"
                ),
                application_name="docpipe-metrics",
            )
        s = Session(self._conn)
        # Runs in flight and awaiting a person are counted (their partial indexes hold only
        # them); ended runs, the history, are estimated from the table's statistics.
        counts = {(r["status"], r["lane"]): r["runs"] for r in s.all("metrics_runs_by_status")}
        estimates = {
            (r["status"], r["lane"]): r["runs"] for r in s.all("metrics_runs_ended_estimate")
        }
        runs = m.scraped_gauge(m.RUNS)
        ended = m.scraped_gauge(m.RUNS_ENDED_ESTIMATE)
        for status in RunStatus:
            for lane in Lane:
                if status in COUNTED_RUN_STATUSES:
                    runs.add_metric([status, lane], counts.get((status, lane), 0))
                else:
                    ended.add_metric([status, lane], estimates.get((status, lane), 0))
        backlog = s.one("metrics_backlogs")
        assert backlog is not None
        jobs = m.scraped_gauge(m.PERIODIC_LAST_FINISHED)
        for row in s.all("metrics_periodic_jobs"):
            jobs.add_metric([row["name"]], row["last_finished"])
        return [
            *self._review_backlog(s),
            *self._provider_batches(s),
            self._evaluation_accuracy(s),
            runs,
            ended,
            m.scraped_gauge(m.BATCH_BACKLOG, backlog["batch_backlog"]),
            m.scraped_gauge(m.OUTBOX_BACKLOG, backlog["outbox_due"]),
            m.scraped_gauge(m.OUTBOX_PARKED, backlog["outbox_parked"]),
            m.scraped_gauge(m.OUTBOX_OLDEST_AGE, backlog["outbox_oldest_age_s"]),
            jobs,
        ]

    def _review_backlog(self, s: Session) -> list[Metric]:
        runs = m.scraped_gauge(m.REVIEW_BACKLOG)
        oldest = m.scraped_gauge(m.REVIEW_OLDEST_AGE)
        for row in s.all("metrics_review_backlog"):
            runs.add_metric([row["tenant_id"], row["pipeline"]], row["runs"])
            oldest.add_metric([row["tenant_id"], row["pipeline"]], row["oldest_age_s"])
        return [runs, oldest, m.scraped_gauge(m.REVIEW_MAX_WAIT, self._settings.review_max_wait_s)]

    def _provider_batches(self, s: Session) -> list[Metric]:
        batches = m.scraped_gauge(m.PROVIDER_BATCHES)
        for row in s.all("metrics_provider_batches"):
            batches.add_metric([row["provider"], row["state"]], row["batches"])
        waiting = m.scraped_gauge(m.PROVIDER_BATCH_CALLS_WAITING)
        oldest = m.scraped_gauge(m.PROVIDER_BATCH_OLDEST_WAIT)
        ages: dict[tuple[str, str], float] = {}
        for row in s.all("metrics_provider_batch_calls"):
            waiting.add_metric([row["provider"], row["model"], row["state"]], row["calls"])
            key = (row["provider"], row["model"])
            ages[key] = max(ages.get(key, 0.0), row["oldest_age_s"])
        for (provider, model), age in ages.items():
            oldest.add_metric([provider, model], age)
        return [batches, waiting, oldest]

    def _evaluation_accuracy(self, s: Session) -> Metric:
        accuracy = m.scraped_gauge(m.EVALUATION_ACCURACY)
        for row in s.all("metrics_evaluation_accuracy"):
            labels = [row["tenant_id"], row["set_name"], row["pipeline"], row["step"]]
            accuracy.add_metric(labels, row["accuracy"])
        return accuracy
