"""The outbox's two ways out: rows published and marked in one transaction, and a step's
next message published straight from the statement that wrote it, marked by its claim."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from docpipe.broker.messages import RUN_STEP
from docpipe.broker.transport import CeleryPublisher, app
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox, publish_written, sweep_outbox
from tests.support.factories import new_run, scalar

_, STEP1, STEP2, _ = DOCUMENT_EXTRACT.step_names
QUEUE = "llm_interactive"


def _recorded_step_1(db: Database, publisher: CeleryPublisher) -> runs.RecordedStep:
    run = new_run(db)
    assert publish_outbox(db, publisher, run.outbox_ids) == 1
    claim = runs.claim_step(db, run.run_id, STEP1, owner="w", lease_s=30)
    assert claim is not None
    recorded = runs.record_step_result(
        db, claim, owner="w", output={}, model="m", prompt_version="v", next_step=STEP2
    )
    assert recorded is not None
    return recorded


def test_a_step_message_published_straight_is_marked_delivered_by_its_claim(
    db: Database, broker: redis.Redis, publisher: CeleryPublisher
) -> None:
    recorded = _recorded_step_1(db, publisher)
    [message] = recorded.messages
    assert (message.topic, message.step, message.queue) == ("step", STEP2, QUEUE)
    assert publish_written(publisher, recorded.messages) == 1
    published = "SELECT published_at IS NOT NULL FROM outbox WHERE id = %s"
    assert scalar(db, published, message.id) is False, "no round trip to mark it"
    assert runs.claim_step(db, message.run_id, STEP2, owner="w", lease_s=30) is not None
    assert scalar(db, published, message.id) is True


def test_the_sweep_leaves_a_waiting_message_and_sends_a_lost_one_once(
    db: Database, broker: redis.Redis, publisher: CeleryPublisher
) -> None:
    recorded = _recorded_step_1(db, publisher)
    broker.delete(QUEUE)  # step 1's message was taken by its worker
    assert publish_written(publisher, recorded.messages) == 1
    time.sleep(0.5)  # past the 0.2 s grace below: the sweep's refusal after it is the test
    # Past its grace, unclaimed, but waiting in its queue: sending it again would double it.
    assert sweep_outbox(db, publisher, broker, grace_s=0.2, lost_after_s=0.2) == 0
    assert broker.llen(QUEUE) == 1
    # Taken off the queue by a worker whose pool has yet to claim the step: not lost yet.
    broker.delete(QUEUE)
    assert sweep_outbox(db, publisher, broker, grace_s=0.2, lost_after_s=30) == 0
    assert broker.llen(QUEUE) == 0
    # Lost (its worker died, or Redis restarted empty): older than all that waits now.
    assert sweep_outbox(db, publisher, broker, grace_s=0.2, lost_after_s=0.2) == 1
    assert broker.llen(QUEUE) == 1
    assert sweep_outbox(db, publisher, broker, grace_s=0.2, lost_after_s=0.2) == 0, "marked"


def test_a_message_carries_no_time_limits_whoever_publishes_it(
    db: Database, broker: redis.Redis, publisher: CeleryPublisher, monkeypatch: Any
) -> None:
    """Celery copies the publisher's task time limits into each message, where they override
    the limits of the worker that runs it: beat's or another pool's would replace a pool's
    own (a threads pool's step would then be timed by a prefork pool's limits)."""
    task = app.tasks[RUN_STEP]
    monkeypatch.setattr(task, "soft_time_limit", 60)  # a publisher configured as a worker
    monkeypatch.setattr(task, "time_limit", 90)
    monkeypatch.setattr(task, "_exec_options", None)
    run = new_run(db)
    assert publish_outbox(db, publisher, run.outbox_ids) == 1
    [raw] = broker.lrange(QUEUE, 0, -1)
    assert json.loads(raw)["headers"]["timelimit"] == [None, None]
