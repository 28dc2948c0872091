"""The Celery app as a transport, shared by everyone who publishes or consumes: JSON
messages of ids on Redis, one queue per lane, no results; and the same Redis as a client of
docpipe's own (queue inspection, the provider limiter, the API's rate limit). Every wait on
Redis is bounded, Celery's and docpipe's: a Redis that stops answering (a crash without a
reset, packets dropped) costs a caller seconds, never a hang.

The messages other processes send are declared here, so that the API publishes them
without loading the worker (and Celery's tracing finds the task it publishes). The work
behind each is bound by the worker with :func:`bind_work`; the worker's own configuration
(time limits, prefetch, beat's schedule) is added in docpipe.worker.app.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from celery import Celery, Task
from celery.signals import after_task_publish
from kombu.entity import Queue
from redis.backoff import NoBackoff
from redis.retry import Retry

from docpipe.broker.messages import DELIVER_WEBHOOK, RUN_STEP, Message
from docpipe.broker.queues import (
    ENQUEUED_AT_HEADER,
    LANE_QUEUES,
    QUEUES,
    RUN_ID_HEADER,
)
from docpipe.observability import metrics, tracing
from docpipe.settings import Settings, get_settings
from docpipe.statuses import Lane

__all__ = ["CeleryPublisher", "app", "bind_work", "redis_client", "transport_config"]

_Work = TypeVar("_Work", bound=Callable[..., None])
_HOSTNAME = socket.gethostname()

_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0.1,
    "interval_step": 0.5,
    "interval_max": 0.6,
}


def transport_config(settings: Settings) -> dict[str, Any]:
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
        "task_queues": [Queue(q, routing_key=q) for q in QUEUES],
        "task_default_queue": LANE_QUEUES[Lane.INTERACTIVE],
        "task_create_missing_queues": False,
        "broker_transport_options": {
            # Must exceed the hard time limit, or a running step's message is handed out
            # twice; recovery of dead workers never waits for it (see docpipe.state.recovery).
            "visibility_timeout": settings.broker_visibility_timeout_s,
            # Without these kombu waits forever on a Redis that stops answering: a publish
            # (the API's request, the outbox sweep) would hang instead of failing over to
            # the outbox sweep.
            "socket_connect_timeout": settings.redis_connect_timeout_s,
            "socket_timeout": settings.redis_socket_timeout_s,
            "socket_keepalive": True,
        },
        "broker_connection_timeout": settings.redis_connect_timeout_s,
        "broker_connection_retry_on_startup": True,
        # A publish tries three times within about a second plus the timeouts above; then
        # it fails, the outbox row stays unpublished and beat's sweep sends it later.
        "task_publish_retry_policy": _PUBLISH_RETRY_POLICY,
        # Task events feed Flower and celery-exporter; docpipe's /metrics need none.
        "task_send_sent_event": settings.celery_task_events,
    }


# Connections of one process' client. A command holds one for its round trip only; past
# this many at once, a command waits for one to come back (redis-py's default pool would
# raise instead, and the limiter would then let calls through unlimited: a threads worker
# has hundreds of steps asking at once).
REDIS_CONNECTIONS = 32


def redis_client(settings: Settings) -> redis.Redis:
    """A client of DOCPIPE_REDIS_URL: connecting gives up after redis_connect_timeout_s, a
    command's answer (and the wait for a free connection) after redis_socket_timeout_s
    (redis.TimeoutError / ConnectionError, RedisErrors)."""
    pool = redis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=REDIS_CONNECTIONS,
        timeout=settings.redis_socket_timeout_s,
        socket_connect_timeout=settings.redis_connect_timeout_s,
        socket_timeout=settings.redis_socket_timeout_s,
        socket_keepalive=True,
        # redis-py retries 10 times by default, which turns one timeout into a minute. Here
        # a command is tried again once, at once, and only when its connection broke (a
        # pooled connection to a restarted server); a timeout is final.
        retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
    )
    return redis.Redis(connection_pool=pool)


app = Celery("docpipe", broker=get_settings().redis_url)
app.conf.update(transport_config(get_settings()))

_work: dict[str, Callable[..., None]] = {}


def bind_work(name: str) -> Callable[[_Work], _Work]:
    """Make the decorated function do the work of message ``name`` in this process."""

    def bind(work: _Work) -> _Work:
        _work[name] = work
        return work

    return bind


def _declare(name: str, **options: Any) -> Task:
    def run(task: Task, *args: Any) -> None:
        if (work := _work.get(name)) is None:
            raise RuntimeError(f"{name}: no work bound in this process (see docpipe.worker)")
        work(task, *args)

    return app.task(name=name, bind=True, acks_late=True, **options)(run)


# A message is acknowledged after its work ran; retries of a step are counted in PostgreSQL.
_declare(RUN_STEP, max_retries=None)
_declare(DELIVER_WEBHOOK)


class CeleryPublisher:
    """Publishes messages as Celery task messages, stamped with their enqueue time (for
    queue-lag metrics and for telling a lost message from a waiting one).

    Tasks are looked up on docpipe's app explicitly: Celery's "current app" is per thread,
    and a web server's worker thread would otherwise publish through Celery's default app.
    """

    def __init__(self, celery: Celery = app) -> None:
        self._app = celery

    def publish(self, message: Message) -> None:
        headers: dict[str, object] = {ENQUEUED_AT_HEADER: time.time()}
        args: tuple[object, ...]
        if message.topic == "step":
            task, args = RUN_STEP, (message.run_id, message.step)
            headers[RUN_ID_HEADER] = message.run_id
        elif message.topic == "webhook":
            task, args = DELIVER_WEBHOOK, (message.payload["delivery_id"],)
        else:
            raise ValueError(f"unknown outbox topic {message.topic!r}")
        # The run's trace continues across the queue (see docpipe.observability.tracing).
        # The arguments are ids: their repr is what Celery's bounded saferepr would print,
        # without its cost on every message.
        # No time limits in the message (None clears the ones Celery would copy from the
        # publisher's configuration): the worker that runs it applies its own pool's.
        with tracing.publish_context(message.run_id, message.traceparent):
            self._app.tasks[task].apply_async(
                args,
                queue=message.queue,
                headers=headers,
                argsrepr=repr(args),
                kwargsrepr="{}",
                time_limit=None,
                soft_time_limit=None,
            )


@after_task_publish.connect
def _count_published(sender: str | None = None, routing_key: str | None = None, **_: Any) -> None:
    metrics.metrics().task_sent.labels(str(sender), _HOSTNAME, routing_key or "unknown").inc()
