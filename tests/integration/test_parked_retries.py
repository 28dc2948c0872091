"""A long retry wait is parked in PostgreSQL, not in Redis (DOCPIPE_PARK_DELAYS_OVER_S), with
real `celery worker` and `celery beat` processes: while it waits no message of the run is in
Redis (not queued, not held by a worker as a countdown), and the step runs once the wait is
over, also when Redis was killed and came back empty in between."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
import redis

from docpipe.broker.queues import QUEUES, RUN_ID_HEADER, sub_lists
from docpipe.broker.transport import CeleryPublisher, app
from docpipe.state.db import Database
from docpipe_dev.localstack import LocalRedis
from docpipe_dev.processes import ManagedProcess
from tests.integration.test_workers import submit, wait_for_end
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import use_celery_broker, wait_until
from tests.support.servers import service_dir

STEP2 = "extract_fields"
# A 429 asking for 4 s makes the step wait 4-6 s: past this, so the wait is parked.
PARKED = {"DOCPIPE_PARK_DELAYS_OVER_S": "2"}
RETRY_AFTER_S = 4.0


@pytest.fixture
def own_redis() -> Iterator[LocalRedis]:
    """A Redis of this test's own, which it kills: it restarts empty (nothing on disk)."""
    with service_dir("parked-redis") as state, LocalRedis(state, persist=False) as server:
        previous = app.conf.broker_url
        use_celery_broker(server.url)
        yield server
        use_celery_broker(previous)


def messages_of(client: redis.Redis, run_id: str) -> list[str]:
    """Where messages of ``run_id`` are in Redis: waiting in a queue, or delivered to a
    worker and not yet acknowledged (a countdown waits there, in kombu's ``unacked``)."""
    found = []
    for queue in QUEUES:
        for name in sub_lists(queue):
            found += [
                name for raw in client.lrange(name, 0, -1) if _of_run(json.loads(raw), run_id)
            ]
    for raw in client.hvals("unacked"):
        if _of_run(json.loads(raw)[0], run_id):
            found.append("unacked")
    return found


def _of_run(message: dict[str, Any], run_id: str) -> bool:
    args = json.loads(base64.b64decode(message["body"]))[0]
    return message["headers"].get(RUN_ID_HEADER) == run_id or run_id in args


def parked_until(db: Database, run_id: str) -> datetime | None:
    """When the step's parked message is due, while it is parked (unpublished)."""
    with db.session() as s:
        row = s.conn.execute(
            b"SELECT available_at FROM outbox WHERE run_id = %s AND step = %s"
            b" AND published_at IS NULL AND available_at > now()",
            (run_id, STEP2),
        ).fetchone()
    return row["available_at"] if row else None


def test_a_long_retry_wait_leaves_no_message_in_redis_and_runs_when_due_after_a_redis_restart(
    db: Database,
    own_redis: LocalRedis,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    env = {"DOCPIPE_REDIS_URL": own_redis.url, **PARKED}
    start_beat(**env)
    start_worker(concurrency=1, **env)
    fake_llm.add_fault("429", count=1, step=STEP2, retry_after=RETRY_AFTER_S)
    run_id = submit(db, CeleryPublisher())

    due = wait_until(lambda: parked_until(db, run_id), timeout_s=60)
    client = redis.Redis.from_url(own_redis.url)
    try:
        assert messages_of(client, run_id) == [], "a parked wait keeps nothing in Redis"
    finally:
        client.close()
    assert scalar(db, "SELECT status FROM pipeline_step_result WHERE step = %s", STEP2) == (
        "pending"
    )
    own_redis.kill()  # every message and the limiter's state are gone
    own_redis.start()

    assert wait_for_end(db, run_id, timeout_s=90) == "done"
    started = scalar(db, "SELECT started_at FROM pipeline_step_result WHERE step = %s", STEP2)
    assert started >= due, "the step ran once its wait was over, not before"
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE step = 'extract_sections'") == 1


def test_a_short_retry_wait_is_a_countdown_that_a_worker_holds_in_redis(
    db: Database,
    own_redis: LocalRedis,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """The other side of the setting (and proof that messages_of sees a waiting message):
    a wait under DOCPIPE_PARK_DELAYS_OVER_S (60 s by default) is a Celery countdown."""
    start_worker(concurrency=1, DOCPIPE_REDIS_URL=own_redis.url)
    fake_llm.add_fault("429", count=1, step=STEP2, retry_after=RETRY_AFTER_S)
    run_id = submit(db, CeleryPublisher())
    client = redis.Redis.from_url(own_redis.url)
    try:
        held = wait_until(lambda: "unacked" in messages_of(client, run_id), timeout_s=60)
        assert held, "the countdown waits in Redis, held by the worker"
    finally:
        client.close()
    assert parked_until(db, run_id) is None
    assert wait_for_end(db, run_id, timeout_s=60) == "done"
