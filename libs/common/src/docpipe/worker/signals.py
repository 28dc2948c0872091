"""Celery signal handlers that give the worker and beat processes their metrics and traces.

==========================  =======================  ====================================
signal                      process                  what happens
==========================  =======================  ====================================
celeryd_init                worker, main             multiprocess metrics dir, /metrics
                                                     with the worker's slot gauges
worker_ready                worker, main             celery_worker_up = 1, concurrency
worker_shutting_down        worker, main             celery_worker_up = 0
worker_process_init         worker, pool process     tracing starts (after the fork; the
                            (threads pool: main)     threads pool sends it when it starts)
worker_process_shutdown     worker, pool process     spans flushed, live gauges dropped
                            (threads pool: main)
task_prerun / postrun ...   worker, pool process     task counters, runtime, queue wait
beat_init                   beat                     /metrics with the Redis/PG gauges
==========================  =======================  ====================================

Importing this module connects the handlers; ``docpipe.worker.app`` does.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from datetime import datetime
from typing import Any

from celery.signals import (
    beat_init,
    celeryd_init,
    task_failure,
    task_postrun,
    task_prerun,
    task_retry,
    task_success,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutting_down,
)

from docpipe.broker.queues import ENQUEUED_AT_HEADER
from docpipe.observability import metrics, multiprocess, tracing
from docpipe.settings import get_settings
from docpipe.worker.slot_collector import SlotCollector
from docpipe.worker.state_collector import StateCollector

__all__: list[str] = []

log = logging.getLogger(__name__)

_HOSTNAME = socket.gethostname()
# task id -> monotonic start; a pool process runs one task at a time, but keep it a dict
# so that an eager call inside a task cannot mix them up.
_started: dict[str, float] = {}


@celeryd_init.connect
def _worker_starting(instance: Any = None, **_: Any) -> None:
    settings = get_settings()
    if not settings.metrics_port:
        return
    metrics.use_multiprocess_dir()
    slots = (SlotCollector(instance),) if instance is not None else ()
    metrics.serve_metrics(
        settings.metrics_port, settings.metrics_host, metrics.exposition_registry(*slots)
    )


@worker_ready.connect
def _worker_ready(sender: Any, **_: Any) -> None:
    m = metrics.metrics()
    hostname = str(sender.hostname)
    concurrency = int(getattr(sender.controller, "concurrency", 0) or 1)
    for queue in sender.task_consumer.queues:
        m.worker_concurrency.labels(hostname, queue.name).set(concurrency)
    m.worker_up.labels(hostname).set(1)
    if path := multiprocess.multiprocess_dir():
        log.info("pool processes keep their metrics in %s", path)


@worker_shutting_down.connect
def _worker_stopping(sender: Any, **_: Any) -> None:
    metrics.metrics().worker_up.labels(str(sender)).set(0)


@worker_process_init.connect
def _pool_process_started(**_: Any) -> None:
    tracing.configure("docpipe-worker")


@worker_process_shutdown.connect
def _pool_process_exiting(**_: Any) -> None:
    try:
        tracing.shutdown()
    finally:
        multiprocess.process_exiting()


def _task_labels(task: Any) -> tuple[str, str, str]:
    request = task.request
    queue = (request.delivery_info or {}).get("routing_key") or "unknown"
    return str(task.name), str(request.hostname or _HOSTNAME), str(queue)


def _queue_wait_s(request: Any, now: float) -> float | None:
    """Seconds since the message was published, or since its ETA (a countdown is not wait)."""
    enqueued_at = getattr(request, ENQUEUED_AT_HEADER, None)
    if not isinstance(enqueued_at, int | float):
        return None
    since = float(enqueued_at)
    if request.eta:
        with contextlib.suppress(ValueError):
            since = max(since, datetime.fromisoformat(str(request.eta)).timestamp())
    return max(0.0, now - since)


@task_prerun.connect
def _task_started(task_id: str, task: Any, **_: Any) -> None:
    m = metrics.metrics()
    labels = _task_labels(task)
    m.task_started.labels(*labels).inc()
    m.worker_tasks_active.labels(labels[1]).inc()
    if (wait := _queue_wait_s(task.request, time.time())) is not None:
        m.task_queue_wait.labels(*labels).observe(wait)
    _started[task_id] = time.monotonic()


@task_postrun.connect
def _task_ended(task_id: str, task: Any, **_: Any) -> None:
    m = metrics.metrics()
    labels = _task_labels(task)
    m.worker_tasks_active.labels(labels[1]).dec()
    if (started := _started.pop(task_id, None)) is not None:
        m.task_runtime.labels(*labels).observe(time.monotonic() - started)


@task_success.connect
def _task_succeeded(sender: Any, **_: Any) -> None:
    metrics.metrics().task_succeeded.labels(*_task_labels(sender)).inc()


@task_failure.connect
def _task_failed(sender: Any, exception: BaseException | None = None, **_: Any) -> None:
    name = type(exception).__name__ if exception is not None else "unknown"
    metrics.metrics().task_failed.labels(*_task_labels(sender), name).inc()


@task_retry.connect
def _task_retried(sender: Any, **_: Any) -> None:
    metrics.metrics().task_retried.labels(*_task_labels(sender)).inc()


@beat_init.connect
def _beat_starting(**_: Any) -> None:
    settings = get_settings()
    registry = metrics.exposition_registry(StateCollector(settings))
    metrics.serve_metrics(settings.metrics_port, settings.metrics_host, registry)
