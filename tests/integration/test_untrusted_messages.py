"""Workers accept JSON messages only: a pickled message (which would run arbitrary code as it
is unpickled) is refused by a real worker, its step never runs, and the worker goes on
serving JSON messages. A well-formed message decides nothing either: a step is claimed only
when PostgreSQL says it may run (admitted, due)."""

from __future__ import annotations

import base64
import json
import pickle
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis

from docpipe.broker.messages import RUN_STEP, Message
from docpipe.broker.transport import CeleryPublisher
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.settings import Settings
from docpipe.state.admission import admit_and_publish
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox
from docpipe_dev.processes import ManagedProcess
from tests.support.factories import new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

STEP1 = DOCUMENT_EXTRACT.step_names[1]  # a text document's extract_text is done with its run
QUEUE = "llm_interactive"
# A contract with a field to find (one without any would pause for a person at its fields
# step: document_extract's poor_extraction rule), so that its runs end done.
TEXT = "TITLE\nPreamble.\n1. ONE\nThe initial term is 12 months.\n"


class CreatesFile:
    """Unpickling this calls open(path, "w"): the file's existence proves code ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def pickled_task_message(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """A Celery protocol-2 task message for docpipe.run_step as the Redis transport stores
    it, with a pickle body (what ``serializer="pickle"`` would send)."""
    task_id = str(uuid.uuid4())
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    body = pickle.dumps((args, kwargs, embed))
    return json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "content-encoding": "binary",
            "content-type": "application/x-python-serialize",
            "headers": {
                "lang": "py",
                "task": RUN_STEP,
                "id": task_id,
                "root_id": task_id,
                "parent_id": None,
                "group": None,
                "retries": 0,
                "eta": None,
                "expires": None,
                "argsrepr": repr(args),
                "kwargsrepr": "{}",
            },
            "properties": {
                "correlation_id": task_id,
                "delivery_mode": 2,
                "priority": 0,
                "delivery_info": {"exchange": "", "routing_key": QUEUE},
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
            },
        }
    ).encode()


def test_a_worker_refuses_pickled_messages_and_keeps_serving_json(
    db: Database,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    publisher: CeleryPublisher,
    start_worker: Callable[..., ManagedProcess],
    tmp_path: Path,
) -> None:
    created = new_run(db, TEXT)  # its first step waits in the outbox, unpublished
    marker = tmp_path / "unpickled"
    worker = start_worker(concurrency=1)

    broker.lpush(QUEUE, pickled_task_message((created.run_id, STEP1), {}))
    broker.lpush(QUEUE, pickled_task_message((created.run_id, STEP1), {"x": CreatesFile(marker)}))
    wait_until(lambda: worker.log_text().count("application/x-python-serialize") >= 2, 30)

    log = worker.log_text()
    assert "Refusing to deserialize untrusted content of type pickle" in log
    assert not marker.exists(), "the pickle was never loaded"
    assert scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = %s", STEP1) == 0
    assert scalar(db, "SELECT count(*) FROM llm_call_log") == 0
    assert broker.llen(QUEUE) == 0 and broker.hlen("unacked") == 0, "refused, not redelivered"
    assert worker.alive()

    # The same step as a JSON message runs at once on the same worker.
    publish_outbox(db, publisher, created.outbox_ids)
    wait_until(
        lambda: (
            scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", created.run_id) == "done"
        )
    )
    assert not marker.exists()


# --- a well-formed message cannot jump admission or a wait --------------------------------


def forge_step_message(publisher: CeleryPublisher, run_id: str, queue: str) -> None:
    """A JSON message for the run's first step that no outbox row sent (a duplicate, or a
    message written to Redis by someone who can reach it)."""
    publisher.publish(Message(id=0, topic="step", queue=queue, run_id=run_id, step=STEP1))


def test_forged_messages_claim_no_step_before_admission_start_at_or_a_retry_wait(
    db: Database,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    publisher: CeleryPublisher,
    settings: Settings,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    not_admitted = new_run(db, TEXT, key="batch", lane="batch").run_id  # waits for admission
    later = datetime.now(UTC) + timedelta(hours=1)
    not_started = new_run(db, TEXT, key="start-at", start_at=later).run_id  # parked in the outbox
    waiting = new_run(db, TEXT, key="retry-wait").run_id  # as after a transient error: 1 h
    execute(
        db,
        "UPDATE pipeline_step_result SET not_before = now() + interval '1 hour' WHERE run_id = %s",
        waiting,
    )
    interactive = start_worker("interactive", concurrency=1)
    batch = start_worker("batch", concurrency=1)

    forge_step_message(publisher, not_admitted, "llm_batch")
    for run_id in (not_started, waiting):
        forge_step_message(publisher, run_id, QUEUE)
    wait_until(lambda: handled(interactive) == 2 and handled(batch) == 1, 30)

    for run_id in (not_admitted, not_started, waiting):
        step = db.one("step_state", run_id=run_id, step=STEP1, lease_s=settings.lease_ttl_s)
        assert step is not None and (step["status"], step["run_status"]) == ("pending", "queued")
    assert scalar(db, "SELECT sum(attempt) FROM pipeline_step_result") == 0
    assert scalar(db, "SELECT count(*) FROM llm_call_log") == 0
    assert fake_llm.stats()["requests_total"] == 0, "nothing was paid"
    # The real messages still come at their time: the step is parked until then.
    due = scalar(
        db,
        "SELECT min(available_at) FROM outbox WHERE run_id = %s AND published_at IS NULL",
        not_started,
    )
    assert abs(due - later) < timedelta(seconds=1)

    # Admission then lets the batch run in, and it runs to the end.
    assert admit_and_publish(db, publisher, settings) == 1
    wait_until(
        lambda: scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", not_admitted) == "done"
    )


def handled(worker: ManagedProcess) -> int:
    """Messages the worker finished with (the task returned)."""
    return len(re.findall(r"Task docpipe\.run_step\[[^\]]+\] succeeded", worker.log_text()))


def execute(db: Database, sql: str, *params: Any) -> None:
    with db.session() as s:
        s.conn.execute(sql.encode(), params)
