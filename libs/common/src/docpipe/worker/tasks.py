"""Celery tasks: one task runs one pipeline step; periodic tasks keep work moving.

The tasks are shells around docpipe's plain functions. A message carries ``(run_id, step)``
and nothing else; what to do with it is decided by the step's row in PostgreSQL. The two
messages other processes send are declared by docpipe.broker.transport; their work is bound
here with ``bind_work``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import psycopg
import redis
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_process_shutdown

from docpipe.backoff import retry_delay
from docpipe.broker.messages import DELIVER_WEBHOOK, RUN_STEP
from docpipe.broker.queues import WEBHOOK_QUEUE
from docpipe.broker.transport import CeleryPublisher, app, bind_work, redis_client
from docpipe.observability import metrics, tracing
from docpipe.pipelines.catalog import catalog
from docpipe.providers.client import ProviderClients
from docpipe.providers.limiter import ProviderLimiter
from docpipe.settings import Settings, get_settings
from docpipe.state import runs
from docpipe.state.admission import admit_and_publish
from docpipe.state.batches import finish_batches
from docpipe.state.db import Database
from docpipe.state.leases import LeaseSession
from docpipe.state.outbox import publish_outbox, publish_written, sweep_outbox
from docpipe.state.periodic import run_once_per_interval
from docpipe.state.recovery import recover_stalled_work
from docpipe.state.retention import prune_retention
from docpipe.state.webhooks import RetryPolicy, queue_webhooks
from docpipe.statuses import ENDED_RUN_STATUSES, Lane
from docpipe.worker.executor import StepExecutor
from docpipe.worker.webhook_delivery import deliver_webhook

__all__ = ["Resources", "resources", "run_step"]

log = logging.getLogger(__name__)


@dataclass
class Resources:
    """What one worker process needs, created after fork (pools and sockets must not be
    shared with the parent)."""

    settings: Settings
    db: Database
    llm: ProviderClients
    executor: StepExecutor
    broker_redis: redis.Redis
    broker: CeleryPublisher
    limiter: ProviderLimiter

    def close(self) -> None:
        self.llm.close()
        if self.executor.leases is not None:
            self.executor.leases.close()
        self.db.close()
        self.broker_redis.close()


@cache
def _resources_for(pid: int) -> Resources:
    settings = get_settings()
    db = Database.from_settings(settings)
    llm = ProviderClients(settings.provider_table, timeout_s=settings.llm_timeout_s)
    broker_redis = redis_client(settings)
    limiter = ProviderLimiter(broker_redis, settings)
    executor = StepExecutor(
        db,
        llm,
        settings,
        gate=limiter,
        interruptions=(SoftTimeLimitExceeded,),
        pipelines=catalog(),
        leases=LeaseSession.from_settings(settings),
    )
    return Resources(
        settings=settings,
        db=db,
        llm=llm,
        executor=executor,
        broker_redis=broker_redis,
        broker=CeleryPublisher(),
        limiter=limiter,
    )


def resources() -> Resources:
    """This process' resources (keyed by pid, so a forked child never uses its parent's)."""
    return _resources_for(os.getpid())


@worker_process_shutdown.connect
def _close_resources(**_: Any) -> None:
    if _resources_for.cache_info().currsize:
        resources().close()


@bind_work(RUN_STEP)
def run_step(self: Task, run_id: str, step: str) -> None:
    """Run one step; publish the next through the outbox, or retry after a transient error."""
    tracing.annotate_step(run_id, step)
    r = resources()
    try:
        outcome = r.executor.run_step(run_id, step)
    except psycopg.OperationalError as exc:
        # PostgreSQL is unreachable: nothing was recorded, try the message again shortly.
        delay = retry_delay(
            self.request.retries + 1,
            base_s=r.settings.retry_backoff_base_s,
            cap_s=r.settings.retry_backoff_cap_s,
        )
        log.warning("database unavailable for %s/%s, retry in %.1fs: %s", run_id, step, delay, exc)
        raise self.retry(countdown=delay) from exc
    publish_written(r.broker, outcome.messages)
    if outcome.lane == Lane.BATCH and outcome.run_status in ENDED_RUN_STATUSES:
        # A batch run ended: its slot in the admission window is free now.
        admit_and_publish(r.db, r.broker, r.settings)
    if outcome.kind == "retry":
        assert outcome.retry_in_s is not None
        if outcome.retry_in_s <= r.settings.park_delays_over_s:
            raise self.retry(countdown=outcome.retry_in_s)
        # A long wait is parked in PostgreSQL: a countdown this long would sit in Redis
        # (and be handed out again after the visibility timeout).
        due = datetime.now(UTC) + timedelta(seconds=outcome.retry_in_s)
        with r.db.transaction() as tx:
            runs.enqueue_step(tx, run_id, step, available_at=due)
    elif outcome.kind == "busy":
        # Another worker holds a live lease; look again once it could have expired.
        raise self.retry(countdown=r.settings.lease_ttl_s)


@app.task(name="docpipe.periodic.recover_stalled_work", ignore_result=True)
def recover_stalled_work_task() -> None:
    r = resources()

    def job() -> dict[str, int]:
        recovered = recover_stalled_work(
            r.db,
            r.broker_redis,
            grace_s=r.settings.redrive_grace_s,
            lease_s=r.settings.lease_ttl_s,
            webhook_retry=RetryPolicy.from_settings(r.settings),
        )
        publish_outbox(r.db, r.broker, recovered.outbox_ids)
        metrics.count_recoveries(recovered.as_dict())
        if recovered.outbox_ids or recovered.expired_runs:
            log.info("reaper: %s", recovered.as_dict())
        return recovered.as_dict()

    run_once_per_interval(r.db, "recover_stalled_work", r.settings.reaper_interval_s, job)


@app.task(name="docpipe.periodic.sweep_outbox", ignore_result=True)
def sweep_outbox_task() -> None:
    r = resources()

    def job() -> dict[str, int]:
        published = sweep_outbox(r.db, r.broker, r.broker_redis, grace_s=r.settings.outbox_grace_s,
                                 lost_after_s=r.settings.redrive_grace_s)  # fmt: skip
        metrics.metrics().outbox_swept.inc(published)
        return {"published": published}

    run_once_per_interval(r.db, "sweep_outbox", r.settings.outbox_sweep_interval_s, job)


@app.task(name="docpipe.periodic.admit_batch_runs", ignore_result=True)
def admit_batch_runs_task() -> None:
    r = resources()

    def job() -> dict[str, int]:
        return {"admitted": admit_and_publish(r.db, r.broker, r.settings)}

    run_once_per_interval(r.db, "admit_batch_runs", r.settings.admission_interval_s, job)


@app.task(name="docpipe.periodic.finish_batches_and_notify", ignore_result=True)
def finish_batches_and_notify_task() -> None:
    r = resources()

    def job() -> dict[str, int]:
        finished = finish_batches(r.db)
        queued = queue_webhooks(r.db, WEBHOOK_QUEUE)
        publish_outbox(r.db, r.broker, queued)
        return {"batches_finished": finished, "webhooks_queued": len(queued)}

    run_once_per_interval(r.db, "finish_batches_and_notify", r.settings.admission_interval_s, job)


@app.task(name="docpipe.periodic.prune_retention", ignore_result=True)
def prune_retention_task() -> None:
    r = resources()

    def job() -> dict[str, int]:
        # Half the soft time limit: the pass ends on its own; the next one continues.
        budget_s = r.settings.task_soft_time_limit_s / 2
        return prune_retention(r.db, r.settings, time_budget_s=budget_s)

    run_once_per_interval(r.db, "prune_retention", r.settings.retention_interval_s, job)


@bind_work(DELIVER_WEBHOOK)
def deliver_webhook_task(_: Task, delivery_id: int) -> None:
    r = resources()
    deliver_webhook(r.db, r.settings, delivery_id)
