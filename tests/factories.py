"""Small builders for test data, through the same functions the API uses."""

from __future__ import annotations

from typing import Any

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state.db import Database
from docpipe.state.documents import put_document
from docpipe.state.runs import CreatedRun, create_run

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


def scalar(db: Database, sql: str, *params: Any) -> Any:
    with db.session() as s:
        row = s.conn.execute(sql.encode(), params).fetchone()
    assert row is not None
    return next(iter(row.values()))
