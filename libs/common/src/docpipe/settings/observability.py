"""Observability: Prometheus metrics, Celery's task events, the review wait alerted on."""

from __future__ import annotations

from pydantic import BaseModel, Field

from docpipe.settings.time_limits import Seconds

__all__ = ["ObservabilitySettings"]


class ObservabilitySettings(BaseModel):
    """Metrics and events"""

    # Workers and beat serve Prometheus metrics at http://<host>:<port>/metrics (0: off);
    # the API serves /metrics on its own port.
    metrics_port: int = Field(
        default=9808,
        ge=0,
        le=65535,
        description=(
            "the API, workers and beat serve Prometheus metrics at `:<port>/metrics` (0: off), "
            "never on the API's public port"
        ),
    )
    metrics_host: str = Field(default="0.0.0.0", description="address that metrics server binds")  # noqa: S104  (scraped from other pods)
    # Celery's task events (task-sent, -received, -started, -succeeded) for Flower and
    # celery-exporter. Off by default: docpipe's own /metrics do not need them, and they cost
    # every step four more Redis messages, about 10 % of a worker's CPU at zero provider
    # latency and 1-2 points of the share of ideal at 0.2 s per call (bench/). Flower turns
    # them on at run time through Celery's remote control; only task-sent needs this setting.
    celery_task_events: bool = Field(
        default=False,
        description=(
            "send Celery's task events from the start (for Flower and celery-exporter; docpipe's "
            "`/metrics` need none, and Flower turns them on at run time through Celery's remote "
            "control, `celery -A docpipe.worker.app control enable_events`); each step costs four "
            "more Redis messages with them: about 10 % of a worker's CPU at zero provider latency, "
            "1-2 points of the share of ideal at 0.2 s per call"
        ),
    )
    review_max_wait_s: Seconds = Field(
        default=86_400.0,
        description=(
            "the longest a run should wait for a person: beat exports it as "
            "`docpipe_review_max_wait_seconds` beside the review backlog, and the alert "
            "`DocpipeReviewWaitTooLong` fires once the oldest review waits longer"
        ),
    )
