"""The Celery application: JSON-only transport for ids, late acks, one queue per lane.

Start a worker pool with ``celery -A docpipe.celery_app worker -Q llm_interactive,...``;
start the single beat with ``celery -A docpipe.celery_app beat``.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.entity import Queue

from docpipe import observability  # noqa: F401  (connects the metrics/tracing signal handlers)
from docpipe.heartbeat import LivenessFile
from docpipe.settings import Settings, get_settings

__all__ = ["LANE_QUEUES", "PERIODIC_QUEUE", "app", "create_app", "periodic_jobs"]

LANE_QUEUES = {"interactive": "llm_interactive", "batch": "llm_batch"}
# Periodic maintenance has its own queue, served by every worker pool, so it never waits
# behind a long batch queue.
PERIODIC_QUEUE = "docpipe_periodic"


def periodic_jobs(settings: Settings) -> dict[str, float]:
    """Periodic task name -> interval in seconds."""
    return {
        "docpipe.periodic.recover_stalled_work": settings.reaper_interval_s,
        "docpipe.periodic.sweep_outbox": settings.outbox_sweep_interval_s,
        "docpipe.periodic.admit_batch_runs": settings.admission_interval_s,
        "docpipe.periodic.finish_batches_and_notify": settings.admission_interval_s,
        "docpipe.periodic.prune_retention": settings.retention_interval_s,
    }


def create_app(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    app = Celery("docpipe", broker=settings.redis_url, include=["docpipe.tasks"])
    app.conf.update(_config(settings))
    app.steps["worker"].add(LivenessFile)
    return app


def _config(settings: Settings) -> dict[str, Any]:
    return {
        # Ids only, JSON only: a pickled message would be code execution on the workers.
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        # Results live in PostgreSQL; Redis keeps nothing but messages.
        "task_ignore_result": True,
        "result_backend": None,
        # A message is acknowledged after its step ran; a dead pool child puts it back.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_queues": [Queue(q, routing_key=q) for q in (*LANE_QUEUES.values(), PERIODIC_QUEUE)],
        "task_default_queue": LANE_QUEUES["interactive"],
        "task_create_missing_queues": False,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "task_time_limit": settings.task_time_limit_s,
        "broker_transport_options": {
            # Must exceed the hard time limit, or a running step's message is handed out
            # twice; recovery of dead workers never waits for it (see docpipe.recovery).
            "visibility_timeout": settings.broker_visibility_timeout_s,
        },
        "broker_connection_retry_on_startup": True,
        "worker_soft_shutdown_timeout": settings.worker_soft_shutdown_s,
        "worker_enable_soft_shutdown_on_idle": True,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_max_tasks_per_child": settings.worker_max_tasks_per_child,
        "worker_max_memory_per_child": settings.worker_max_memory_per_child_mb * 1024,
        # Task events feed Flower and celery-exporter; docpipe's /metrics need none.
        "worker_send_task_events": settings.celery_task_events,
        "task_send_sent_event": settings.celery_task_events,
        "worker_hijack_root_logger": False,
        # In memory: the default shelve-backed schedule file is pickle.
        "beat_scheduler": "docpipe.heartbeat:LivenessScheduler",
        "beat_schedule": {
            name: {
                "task": name,
                "schedule": interval,
                # A tick nobody consumed within its interval is superseded by the next one.
                "options": {"queue": PERIODIC_QUEUE, "expires": max(interval, 1.0)},
            }
            for name, interval in periodic_jobs(settings).items()
        },
    }


app = create_app()
