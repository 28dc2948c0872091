"""The Celery app of the worker pools and beat: the broker's transport app
(docpipe.broker.transport) with late acks, time limits, the liveness file and beat's schedule.

Start a worker pool with ``celery -A docpipe.worker.app worker -Q llm_interactive,...``;
start the single beat with ``celery -A docpipe.worker.app beat``.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from celery.exceptions import CPendingDeprecationWarning
from celery.signals import celeryd_after_setup

from docpipe.broker.queues import PERIODIC_QUEUE
from docpipe.broker.transport import app
from docpipe.pipelines.catalog import catalog
from docpipe.settings import Settings, get_settings
from docpipe.worker import (
    signals,  # noqa: F401  (importing connects the metrics/tracing handlers)
    tasks,
)
from docpipe.worker.liveness import LivenessFile
from docpipe.worker.pool_watch import PoolWatch

__all__ = ["THREADS_POOL", "app", "periodic_jobs", "worker_config"]

THREADS_POOL = "docpipe.worker.thread_pool:ThreadSlotPool"


def periodic_jobs(settings: Settings) -> dict[str, float]:
    """Periodic task name -> interval in seconds."""
    return {
        tasks.recover_stalled_work_task.name: settings.reaper_interval_s,
        tasks.sweep_outbox_task.name: settings.outbox_sweep_interval_s,
        tasks.admit_batch_runs_task.name: settings.admission_interval_s,
        tasks.finish_batches_and_notify_task.name: settings.admission_interval_s,
        tasks.prune_retention_task.name: settings.retention_interval_s,
        tasks.provider_batches_task.name: settings.provider_batch_interval_s,
    }


def worker_config(settings: Settings) -> dict[str, Any]:
    return {
        # A message is acknowledged after its step ran; a dead pool child puts it back.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "task_time_limit": settings.task_time_limit_s,
        "worker_soft_shutdown_timeout": settings.worker_soft_shutdown_s,
        "worker_enable_soft_shutdown_on_idle": True,
        # On a broker connection loss Celery would SIGTERM every running late-ack task
        # (its message cannot be acknowledged on the new connection): a provider call on
        # the wire would be lost unrecorded and paid again by the step's next attempt
        # (tests/integration/test_broker_disconnect.py). Running steps need the broker for
        # nothing: the lease in PostgreSQL says who owns them, results and next messages go
        # through PostgreSQL and the outbox, and their message, should it be handed out
        # again, finds the step done or leased (a no-op). Celery 6 turns this on by default.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        # A full Redis (maxmemory, noeviction) refuses the consumer's bookkeeping writes with
        # OOM, a ResponseError that kombu counts as a channel error; Celery would call it
        # unrecoverable and stop the worker. Reconnect instead, and carry on once memory
        # frees (tests/chaos: "Redis at maxmemory").
        "broker_channel_error_retry": True,
        # The pool: prefork unless DOCPIPE_WORKER_POOL=threads (the command line's --pool is
        # left at its default, which Celery then takes from here).
        **({"worker_pool": THREADS_POOL} if settings.worker_pool == "threads" else {}),
        "worker_max_tasks_per_child": settings.worker_max_tasks_per_child,
        "worker_max_memory_per_child": settings.worker_max_memory_per_child_mb * 1024,
        "worker_send_task_events": settings.celery_task_events,
        "worker_hijack_root_logger": False,
        # In memory: the default shelve-backed schedule file is pickle.
        "beat_scheduler": "docpipe.worker.liveness:LivenessScheduler",
        "beat_schedule": {
            name: {
                "task": name,
                "schedule": interval,
                # A tick nobody consumed within its interval is superseded by the next one;
                # the worker that runs it applies its own time limits, not beat's.
                "options": {
                    "queue": PERIODIC_QUEUE,
                    "expires": max(interval, 1.0),
                    "time_limit": None,
                    "soft_time_limit": None,
                },
            }
            for name, interval in periodic_jobs(settings).items()
        },
    }


@celeryd_after_setup.connect
def _quiet_the_connection_loss_notice(**_: Any) -> None:
    """Celery warns on every connection loss that the setting above will default to True in
    6.0; docpipe sets it explicitly, so the warning would only add a screenful to each
    outage's log. (Installed after Celery's logging set-up, which shows all its warnings.)"""
    warnings.filterwarnings(
        "ignore",
        message=r"\s*In Celery 5\.1 we introduced an optional breaking change",
        category=CPendingDeprecationWarning,
    )


@celeryd_after_setup.connect
def _quiet_each_provider_request(**_: Any) -> None:
    """httpx logs every request it sends at INFO: a line per provider call, which
    llm_call_log records already (status, latency, cost). In a threads worker of 200 slots
    those lines took 4 % of the process' CPU, every thread taking logging's one lock;
    httpx's warnings and errors still show."""
    logging.getLogger("httpx").setLevel(logging.WARNING)


app.conf.update(worker_config(get_settings()))
app.steps["worker"].add(LivenessFile)
app.steps["worker"].add(PoolWatch)
# A broken pipeline definition stops the worker (and beat) before it takes any message.
catalog()
