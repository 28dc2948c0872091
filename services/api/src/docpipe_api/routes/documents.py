"""Documents: store a contract once (text, PDF or DOCX), read its metadata, start an
extraction run on it, delete it."""

from __future__ import annotations

import logging
import os
import uuid
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from docpipe.errors import InvalidRequestError
from docpipe.observability import metrics, tracing
from docpipe.state import runs
from docpipe.state.admission import admit_after_commit
from docpipe.state.db import Session
from docpipe.state.documents import (
    StoredDocument,
    delete_document,
    document_text,
    get_document,
    put_document,
    put_file,
)
from docpipe.state.outbox import publish_outbox
from docpipe.statuses import Lane
from docpipe_api.bounds import accepted_callback_url, checked_deadline, checked_start_at, run_budget
from docpipe_api.deps import (
    BrokerDep,
    DatabaseDep,
    DocumentUploadDep,
    ExtractRequestDep,
    IdempotencyKeyDep,
    PipelinesDep,
    SettingsDep,
    TenantDep,
    Upload,
)
from docpipe_api.errors import error_responses
from docpipe_api.links import follow
from docpipe_api.review_schemas import DocumentTextOut
from docpipe_api.schemas import (
    DOCUMENT_ID_ECMA,
    NO_NUL,
    DocumentOut,
    DocumentText,
    ExtractAccepted,
    ExtractRequest,
    request_body_schema,
)

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["documents"])

PDF_MEDIA_TYPE = "application/pdf"
DOCX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

# Documented, not enforced here: put_document refuses other ids with a clear 422, and
# reading one that cannot exist is a 404. OpenAPI patterns are ECMA-262, where $ is \Z.
DocumentIdPath = Annotated[str, Path(json_schema_extra={"pattern": DOCUMENT_ID_ECMA})]

_DOCUMENT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": (
            "The contract: a PDF or DOCX file (recognised from its bytes, whatever the "
            'Content-Type), or its text as UTF-8 text/plain or JSON {"text": "..."}. Each '
            "format has its size limit (DOCPIPE_MAX_PDF_BYTES, DOCPIPE_MAX_DOCX_BYTES, "
            "DOCPIPE_MAX_DOCUMENT_BYTES for text): more is 413, naming it"
        ),
        "content": {
            "text/plain": {"schema": {"type": "string", "pattern": NO_NUL}},
            "application/json": {"schema": DocumentText.model_json_schema()},
            # A file's bytes; the API reads the format from them, under any media type.
            PDF_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
            DOCX_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    }
}
_EXTRACT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": request_body_schema(ExtractRequest)}},
    }
}


_RUN_LINKS = follow("run_id", "run_id", "read_run", "cancel_run", "retry_run", "stream_run_events")
_DOCUMENT_LINKS = follow("document_id", "id", "read_document", "start_extraction",
                         "remove_document")  # fmt: skip


def _store(tx: Session, tenant: str, document_id: str, upload: Upload) -> StoredDocument:
    if upload.file is None:
        return put_document(tx, tenant, document_id, upload.text)
    return put_file(tx, tenant, document_id, upload.file, upload.format)


def _stored_out(stored: StoredDocument, response: Response) -> DocumentOut:
    response.headers["Location"] = f"/documents/{stored.id}"
    return DocumentOut.model_validate(stored)


@router.put(
    "/documents/{document_id}",
    status_code=201,
    response_model=DocumentOut,
    summary="Store a document under this id",
    responses={
        200: {"model": DocumentOut, "description": "The same text was already stored"}
        | _DOCUMENT_LINKS,
        201: _DOCUMENT_LINKS,
        **error_responses(409, 413, 415, 422, 503),
    },
    openapi_extra=_DOCUMENT_BODY,
)
def store_document(
    document_id: DocumentIdPath,
    upload: DocumentUploadDep,
    db: DatabaseDep,
    tenant: TenantDep,
    response: Response,
) -> DocumentOut:
    """201 when stored, 200 when this content was already stored, 409 for other content."""
    with db.transaction() as tx:
        stored = _store(tx, tenant, document_id, upload)
    response.status_code = 201 if stored.created else 200
    return _stored_out(stored, response)


@router.post(
    "/documents",
    status_code=201,
    response_model=DocumentOut,
    summary="Store a document under a new id",
    responses={201: _DOCUMENT_LINKS, **error_responses(413, 415, 422, 503)},
    openapi_extra=_DOCUMENT_BODY,
)
def create_document(
    upload: DocumentUploadDep, db: DatabaseDep, tenant: TenantDep, response: Response
) -> DocumentOut:
    with db.transaction() as tx:
        stored = _store(tx, tenant, uuid.uuid4().hex, upload)
    return _stored_out(stored, response)


@router.get(
    "/documents/{document_id}",
    response_model=DocumentOut,
    summary="A document's metadata",
    responses=error_responses(404, 422, 503),
)
def read_document(document_id: DocumentIdPath, db: DatabaseDep, tenant: TenantDep) -> DocumentOut:
    with db.session() as s:
        return DocumentOut.model_validate(get_document(s, tenant, document_id))


@router.delete(
    "/documents/{document_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a document and its ended runs (409 while a run that uses it goes on)",
    responses=error_responses(404, 409, 422, 503),
)
def remove_document(document_id: DocumentIdPath, db: DatabaseDep, tenant: TenantDep) -> Response:
    """The text, and the runs that ended on it (steps, outputs, calls, webhook deliveries),
    are gone; a run not yet ended keeps the document and answers 409 naming it."""
    with db.transaction() as tx:
        delete_document(tx, tenant, document_id)
    return Response(status_code=204)


@router.post(
    "/documents/{document_id}/extract",
    status_code=202,
    response_model=ExtractAccepted,
    summary="Start an extraction run (idempotent with an Idempotency-Key)",
    responses={
        202: _RUN_LINKS,
        **error_responses(403, 404, 409, 413, 415, 422, 503),
    },
    openapi_extra=_EXTRACT_BODY,
)
def start_extraction(
    document_id: DocumentIdPath,
    options: ExtractRequestDep,
    key: IdempotencyKeyDep,
    db: DatabaseDep,
    broker: BrokerDep,
    settings: SettingsDep,
    pipelines: PipelinesDep,
    tenant: TenantDep,
    response: Response,
) -> ExtractAccepted:
    """The same Idempotency-Key returns the same run; with other options it is a 409."""
    pipeline = pipelines.get(options.pipeline)
    now = datetime.now(UTC)
    budget = run_budget(options.budget_usd, settings, field="budget_usd")
    if options.start_at is not None:
        if options.lane != Lane.INTERACTIVE:
            raise InvalidRequestError("start_at applies to the interactive lane only")
        checked_start_at(options.start_at, now, settings)
    # A run that is to start later has its time from then on.
    deadline_at = checked_deadline(options.deadline_s, max(now, options.start_at or now), settings)
    callback_url = accepted_callback_url(db, settings, tenant, options.callback_url)
    with db.transaction() as tx:
        get_document(tx, tenant, document_id)  # 404 before the foreign key can object
        created = runs.create_run(
            tx,
            tenant_id=tenant,
            document_id=document_id,
            pipeline=pipeline,
            lane=options.lane,
            priority=options.priority,  # create_run gives the lane's default
            idempotency_key=key or uuid.uuid4().hex,
            request={"document_id": document_id, **options.fingerprint()},
            deadline_at=deadline_at,
            budget_usd=budget,
            callback_url=callback_url,
            start_at=options.start_at,
            # The run's steps join this request's trace (see docpipe.observability.tracing).
            traceparent=tracing.current_traceparent(),
        )
    if created.created:
        metrics.metrics().runs_created.labels(pipeline.key, options.lane).inc()
    _crash_point("api.after_commit")
    # A future start is not due yet: it stays parked and the sweep publishes it in time.
    publish_outbox(db, broker, created.outbox_ids)
    if created.created and options.lane == Lane.BATCH:
        admit_after_commit(db, broker, settings)
    status = runs.run_progress(db, tenant, created.run_id).status
    response.headers["Location"] = f"/runs/{created.run_id}"
    return ExtractAccepted(run_id=created.run_id, status=status, created=created.created)


def _crash_point(name: str) -> None:
    """The chaos tests' kill between the commit and the publish: exit at once with status 137
    (no cleanup, no flush, as a SIGKILL would) when DOCPIPE_CRASH_AT is ``name``."""
    if _crash_at() == name:
        log.critical("crash point %r reached (DOCPIPE_CRASH_AT): exiting with status 137", name)
        os._exit(137)


@cache
def _crash_at() -> str | None:
    # Read once: the tests set it before they start the process, and every extract request
    # passes here.
    return os.environ.get("DOCPIPE_CRASH_AT")


@router.get(
    "/documents/{document_id}/text",
    response_model=DocumentTextOut,
    summary="A document's text (or one page of it), which evidence offsets refer to",
    responses=error_responses(404, 409, 422, 503),
)
def read_document_text(
    document_id: DocumentIdPath,
    db: DatabaseDep,
    tenant: TenantDep,
    page: Annotated[int | None, Query(ge=1, le=100_000, description="1-based page")] = None,
) -> DocumentTextOut:
    """409 while a PDF's or DOCX's text is not extracted yet; 404 for a page past the end."""
    found = document_text(db, tenant, document_id)
    start, text = (0, found.text) if page is None else found.page(page)
    return DocumentTextOut(document_id=document_id, format=found.format,
                           pages=len(found.page_starts), page_starts=found.page_starts,
                           page=page, start=start, text=text)  # fmt: skip
