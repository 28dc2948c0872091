"""Peer (b): plain Celery, one task per step chained, no state: the document and the
outputs so far travel in each message (Celery's ``chain`` passes each step's return value
to the next task).

    celery -A bench.peers.celery_steps worker -Q peer --concurrency C
"""

from __future__ import annotations

from typing import Any

from celery import Celery, chain

from bench.peers.celery_common import RETRY_TRANSIENT, create_app, mark_done
from bench.peers.pipeline import PIPELINE, run_step

app = create_app("peer_steps")


@app.task(name="peer.step", **RETRY_TRANSIENT)
def step(outputs: dict[str, Any], doc_id: str, document: str, name: str) -> dict[str, Any]:
    outputs = {**outputs, name: run_step(name, document, outputs)}
    if name == PIPELINE.steps[-1].name:
        mark_done(doc_id)
    return outputs


def submit(publisher: Celery, doc_id: str, document: str) -> None:
    first, *rest = PIPELINE.step_names
    chain(
        publisher.signature("peer.step", args=({}, doc_id, document, first)),
        *(publisher.signature("peer.step", args=(doc_id, document, name)) for name in rest),
    ).apply_async()
