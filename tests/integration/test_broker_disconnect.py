"""A worker whose broker connection is cut while a step's provider calls are on the wire.

Celery's ``worker_cancel_long_running_tasks_on_connection_loss`` (celery/worker/consumer/
consumer.py, ``on_connection_error_after_connected``) terminates every running late-ack task
when the consumer loses the broker: the pool child gets SIGTERM mid-call, the answer of the
call in flight is never recorded, and the step's next attempt pays for it again (measured
with it on: 17 provider requests for 16 calls, the step at attempt 2).
docpipe leaves running steps alone instead: their lease in PostgreSQL says who owns them,
their result and next message go through PostgreSQL and the outbox, and their message (still
unacknowledged in Redis) is a no-op should it come back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from docpipe.broker.transport import CeleryPublisher
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox
from docpipe_dev.localstack import LocalRedis
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = max(sample_contracts(8), key=lambda c: c.text.count("\n"))
SECTIONS = "extract_sections"  # one provider call, made by the step's own thread


def test_a_broker_disconnect_does_not_kill_running_steps_nor_pay_their_calls_twice(
    db: Database,
    broker: redis.Redis,
    redis_server: LocalRedis,
    publisher: CeleryPublisher,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    fake_llm.configure(latency_ms=[4000, 4000])  # slow calls: the cut lands mid-call
    worker = start_worker("interactive", concurrency=1, DOCPIPE_LLM_TIMEOUT_S="8")
    start_beat()  # the reaper, should a step be orphaned after all
    created = new_run(db, CONTRACT.text, document_id="contract", key="k")
    publish_outbox(db, publisher, created.outbox_ids)
    # The provider has received calls of step 2 and is working on them.
    wait_until(lambda: fake_llm.stats()["by_step"].get(SECTIONS, 0) >= 1, timeout_s=60)

    # The broker crashes and comes back a few seconds later (empty: its messages are lost,
    # PostgreSQL knows what to do). A mere CLIENT KILL is not enough: kombu reconnects its
    # consumer on its own, and Celery never sees a connection loss.
    redis_server.kill()
    worker.wait_for_log("Connection to broker lost", timeout_s=30)
    # Only the call on the wire at the cut must be slow (the provider chose its latency when
    # it came): the steps after it go at full speed (they took 20 s at 4 s a call).
    fake_llm.configure(latency_ms=[0, 0])
    time.sleep(2)
    redis_server.start()
    wait_until(lambda: scalar(db, "SELECT status FROM pipeline_run") != "running", 120)

    assert scalar(db, "SELECT status FROM pipeline_run") == "done"
    # Every call went to the provider exactly once and is on record exactly once.
    sent = fake_llm.stats()["requests_total"]
    rows = scalar(db, "SELECT count(*) FROM llm_call_log")
    keys = scalar(db, "SELECT count(DISTINCT (step, call_key)) FROM llm_call_log")
    assert (sent, rows) == (keys, keys)
    # The step ran once: Celery did not terminate it.
    assert scalar(db, "SELECT max(attempt) FROM pipeline_step_result") == 1
    assert "Terminating it instead" not in worker.log_text()
    assert "CPendingDeprecationWarning" not in worker.log_text()  # a deliberate choice
