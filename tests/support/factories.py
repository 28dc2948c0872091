"""Small builders for test data, through the same functions the API uses."""

from __future__ import annotations

from typing import Any

import redis

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.text_extraction import EXTRACT_TEXT, EXTRACT_TEXT_STEP
from docpipe.settings import Settings
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.documents import put_document
from docpipe.state.runs import CreatedRun, create_run
from docpipe.worker.text_extraction import extract_document_text

TENANT = "acme"


def new_run(
    db: Database,
    text: str = "TITLE\nPreamble.\n1. ONE\nText.\n",
    *,
    document_id: str = "doc-1",
    key: str = "key-1",
    lane: str = "interactive",
    tenant_id: str = TENANT,
    **options: Any,
) -> CreatedRun:
    """A run of document_extract:v1 on ``text``, as the API creates it: its extract_text step
    is done (create_run does a known text's), the run waits at extract_sections."""
    with db.transaction() as tx:
        put_document(tx, tenant_id, document_id, text)
        return create_run(
            tx,
            tenant_id=tenant_id,
            document_id=document_id,
            pipeline=DOCUMENT_EXTRACT,
            lane=lane,
            idempotency_key=key,
            request={"document_id": document_id, "lane": lane, **options},
            **options,
        )


def extract_text(db: Database, run_id: str) -> None:
    """Run a file's extract_text step as a worker would, through the state machine (a known
    text's is done when its run is created)."""
    claim = runs.claim_step(db, run_id, EXTRACT_TEXT, owner="factory", lease_s=30)
    assert claim is not None, f"{run_id}: extract_text is not claimable"
    output = extract_document_text(db, Settings(), claim.tenant_id, claim.document_id)
    recorded = runs.record_step_result(
        db,
        claim,
        owner="factory",
        output=output,
        model=None,
        prompt_version=EXTRACT_TEXT_STEP.prompt_version,
        next_step=DOCUMENT_EXTRACT.next_step(EXTRACT_TEXT),
    )
    assert recorded is not None


def scalar(db: Database, sql: str, *params: Any) -> Any:
    with db.session() as s:
        row = s.conn.execute(sql.encode(), params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def script_calls(client: redis.Redis) -> int:
    """How many EVALSHA calls (the limiter's scripts) Redis has served since it started."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))
