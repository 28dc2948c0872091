"""Workers accept JSON messages only: a pickled message (which would run arbitrary code as it
is unpickled) is refused by a real worker, its step never runs, and the worker goes on
serving JSON messages."""

from __future__ import annotations

import base64
import json
import pickle
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from docpipe.broker.messages import RUN_STEP
from docpipe.broker.transport import CeleryPublisher
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox
from docpipe_dev.processes import ManagedProcess
from tests.factories import new_run, scalar
from tests.fakellm import FakeLLM
from tests.processes import wait_until

STEP1 = DOCUMENT_EXTRACT.step_names[0]
QUEUE = "llm_interactive"


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
    return json.dumps({
        "body": base64.b64encode(body).decode(),
        "content-encoding": "binary",
        "content-type": "application/x-python-serialize",
        "headers": {"lang": "py", "task": RUN_STEP, "id": task_id, "root_id": task_id,
                    "parent_id": None, "group": None, "retries": 0, "eta": None,
                    "expires": None, "argsrepr": repr(args), "kwargsrepr": "{}"},
        "properties": {"correlation_id": task_id, "delivery_mode": 2, "priority": 0,
                       "delivery_info": {"exchange": "", "routing_key": QUEUE},
                       "body_encoding": "base64", "delivery_tag": str(uuid.uuid4())},
    }).encode()  # fmt: skip


def test_a_worker_refuses_pickled_messages_and_keeps_serving_json(
    db: Database,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    publisher: CeleryPublisher,
    start_worker: Callable[..., ManagedProcess],
    tmp_path: Path,
) -> None:
    created = new_run(db)  # its first step waits in the outbox, unpublished
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
