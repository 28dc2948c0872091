"""Peer (a): plain Celery, the whole pipeline in one task.

celery -A bench.peers.celery_whole worker -Q peer --concurrency C
"""

from __future__ import annotations

from celery import Celery

from bench.peers.celery_common import RETRY_TRANSIENT, create_app, mark_done
from bench.peers.pipeline import run_document

app = create_app("peer_whole")


@app.task(name="peer.whole", **RETRY_TRANSIENT)
def whole(doc_id: str, document: str) -> None:
    run_document(document)
    mark_done(doc_id)


def submit(publisher: Celery, doc_id: str, document: str) -> None:
    publisher.send_task("peer.whole", (doc_id, document))
