"""What both plain-Celery peers share: the same broker settings as docpipe, and a tally.

Settings are docpipe's where they matter for the comparison: JSON only, no result backend,
late acks with requeue on a lost worker, prefetch 1, prefork pool; a transient provider error
is retried with backoff (``RETRY_TRANSIENT``), as docpipe retries it. The broker is a Redis
database of its own (``PEER_REDIS_URL``). ``PEER_VISIBILITY_TIMEOUT_S`` is how long an
unacknowledged message of a dead worker waits before Redis hands it out again (Celery's
default: 3600 s); the crash benchmark sets it low and says so.
"""

from __future__ import annotations

import os
import time
from functools import cache

import redis
from celery import Celery

from docpipe.errors import TransientLLMError

__all__ = ["DONE_KEY", "QUEUE", "RETRY_TRANSIENT", "create_app", "mark_done"]

# Task options: a provider timeout or 5xx is retried, as docpipe does, instead of losing the
# document (which would leave the benchmark waiting for it).
RETRY_TRANSIENT = {
    "autoretry_for": (TransientLLMError,),
    "retry_backoff": 1,
    "retry_backoff_max": 10,
    "max_retries": 5,
}

QUEUE = "peer"
DONE_KEY = "peer:done"  # document id -> unix time its pipeline finished (measurement only)


def create_app(name: str) -> Celery:
    visibility_timeout = float(os.environ.get("PEER_VISIBILITY_TIMEOUT_S", "3600"))
    app = Celery(name, broker=os.environ["PEER_REDIS_URL"])  # never a default: no stray queues
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=QUEUE,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": visibility_timeout,
            # Look for abandoned messages every second, so that recovery takes the
            # visibility timeout and not up to 100 s more.
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
    )
    return app


@cache
def _redis(pid: int) -> redis.Redis:
    return redis.Redis.from_url(os.environ["PEER_REDIS_URL"])


def mark_done(doc_id: str) -> None:
    _redis(os.getpid()).hset(DONE_KEY, doc_id, repr(time.time()))
