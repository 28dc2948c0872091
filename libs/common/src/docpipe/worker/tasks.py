"""Celery tasks: one task runs one pipeline step; periodic tasks keep work moving.

The tasks are shells around docpipe's plain functions. A message carries ``(run_id, step)``
and nothing else; what to do with it is decided by the step's row in PostgreSQL. The two
messages other processes send are declared by docpipe.broker.transport; their work is bound
here with ``bind_work``.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from functools import cache
from typing import Any

import redis
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_process_shutdown

from docpipe.broker.messages import DELIVER_WEBHOOK, RUN_STEP
from docpipe.broker.queues import WEBHOOK_QUEUE
from docpipe.broker.transport import CeleryPublisher, app, bind_work, redis_client
from docpipe.observability import metrics, tracing
from docpipe.pipelines.catalog import catalog
from docpipe.providers.batch_interfaces import BatchInterface
from docpipe.providers.client import ProviderClients
from docpipe.providers.limiter import ProviderLimiter
from docpipe.settings import Settings, get_settings
from docpipe.state.admission import admit_and_publish
from docpipe.state.after_commit import AfterCommit, dispatch_after_commit
from docpipe.state.batches import finish_batches
from docpipe.state.db import Database
from docpipe.state.leases import LeaseSession
from docpipe.state.outbox import sweep_outbox
from docpipe.state.periodic import run_once_per_interval
from docpipe.state.recovery import recover_stalled_work
from docpipe.state.retention import expire_reviews, prune_retention
from docpipe.state.webhooks import RetryPolicy, queue_webhooks
from docpipe.statuses import ENDED_RUN_STATUSES, Lane
from docpipe.worker.executor import StepExecutor
from docpipe.worker.provider_batches import batch_interfaces, run_provider_batches
from docpipe.worker.thread_pool import on_hard_limit
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
    batch_interfaces: dict[str, BatchInterface]

    def close(self) -> None:
        self.llm.close()
        for interface in self.batch_interfaces.values():
            interface.close()
        if self.executor.leases is not None:
            self.executor.leases.close()
        self.db.close()
        self.broker_redis.close()


# Many threads of a threads pool may ask for the resources at once: they are made once.
_resources_lock = threading.Lock()


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
        batch_interfaces=batch_interfaces(settings),
    )


def resources() -> Resources:
    """This process' resources (keyed by pid, so a forked child never uses its parent's)."""
    with _resources_lock:
        return _resources_for(os.getpid())


@worker_process_shutdown.connect
def _close_resources(**_: Any) -> None:
    if _resources_for.cache_info().currsize:
        resources().close()


@on_hard_limit
def _give_up_steps_of(thread: int) -> None:
    """A task of a threads pool passed its hard time limit: give its steps up."""
    if _resources_for.cache_info().currsize:
        resources().executor.give_up(thread)


@bind_work(RUN_STEP)
def run_step(self: Task, run_id: str, step: str) -> None:
    """Run one step, send what it wrote after its commit, and hand Celery the countdown the
    executor chose (docpipe.worker.step_endings), if any."""
    tracing.annotate_step(run_id, step)
    r = resources()
    outcome = r.executor.run_step(run_id, step, redelivery=self.request.retries)
    # A batch run that ended frees its slot in the admission window.
    ended = outcome.lane == Lane.BATCH and outcome.run_status in ENDED_RUN_STATUSES
    dispatch_after_commit(
        r.db, r.broker, r.settings, AfterCommit(messages=outcome.messages, admit=ended)
    )
    if outcome.countdown_s is not None:
        raise self.retry(countdown=outcome.countdown_s)


@app.task(name="docpipe.periodic.recover_stalled_work", ignore_result=True)
def recover_stalled_work_task() -> None:
    r = resources()

    def job(db: Database) -> dict[str, int]:
        recovered = recover_stalled_work(
            db,
            r.broker_redis,
            grace_s=r.settings.redrive_grace_s,
            lease_s=r.settings.lease_ttl_s,
            webhook_retry=RetryPolicy.from_settings(r.settings),
        )
        after = AfterCommit(outbox_ids=recovered.outbox_ids)
        dispatch_after_commit(db, r.broker, r.settings, after)
        metrics.count_recoveries(recovered.as_dict())
        if recovered.outbox_ids or recovered.expired_runs:
            log.info("reaper: %s", recovered.as_dict())
        return recovered.as_dict()

    run_once_per_interval(r.db, "recover_stalled_work", r.settings.reaper_interval_s, job)


@app.task(name="docpipe.periodic.sweep_outbox", ignore_result=True)
def sweep_outbox_task() -> None:
    r = resources()

    def job(db: Database) -> dict[str, int]:
        published = sweep_outbox(
            db,
            r.broker,
            r.broker_redis,
            grace_s=r.settings.outbox_grace_s,
            lost_after_s=r.settings.redrive_grace_s,
        )
        metrics.metrics().outbox_swept.inc(published)
        return {"published": published}

    run_once_per_interval(r.db, "sweep_outbox", r.settings.outbox_sweep_interval_s, job)


@app.task(name="docpipe.periodic.admit_batch_runs", ignore_result=True)
def admit_batch_runs_task() -> None:
    r = resources()

    def job(db: Database) -> dict[str, int]:
        return {"admitted": admit_and_publish(db, r.broker, r.settings)}

    run_once_per_interval(r.db, "admit_batch_runs", r.settings.admission_interval_s, job)


@app.task(name="docpipe.periodic.finish_batches_and_notify", ignore_result=True)
def finish_batches_and_notify_task() -> None:
    r = resources()

    def job(db: Database) -> dict[str, int]:
        finished = finish_batches(db)
        queued = queue_webhooks(db, WEBHOOK_QUEUE)
        dispatch_after_commit(db, r.broker, r.settings, AfterCommit(outbox_ids=queued))
        return {"batches_finished": finished, "webhooks_queued": len(queued)}

    run_once_per_interval(r.db, "finish_batches_and_notify", r.settings.admission_interval_s, job)


@app.task(name="docpipe.periodic.provider_batches", ignore_result=True)
def provider_batches_task() -> None:
    r = resources()

    def job(db: Database) -> dict[str, int]:
        done = run_provider_batches(db, r.broker, r.settings, r.batch_interfaces)
        return done.as_dict()

    run_once_per_interval(r.db, "provider_batches", r.settings.provider_batch_interval_s, job)


@app.task(name="docpipe.periodic.prune_retention", ignore_result=True)
def prune_retention_task() -> None:
    r = resources()

    def job(db: Database) -> dict[str, int]:
        expired = expire_reviews(db, r.settings)
        metrics.count_expired_reviews(expired)
        # Half the soft time limit: the pass ends on its own; the next one continues.
        budget_s = r.settings.task_soft_time_limit_s / 2
        deleted = prune_retention(db, r.settings, time_budget_s=budget_s)
        return {"reviews_expired": sum(expired.values()), **deleted}

    run_once_per_interval(r.db, "prune_retention", r.settings.retention_interval_s, job)


@bind_work(DELIVER_WEBHOOK)
def deliver_webhook_task(_: Task, delivery_id: int) -> None:
    r = resources()
    deliver_webhook(r.db, r.settings, delivery_id)
