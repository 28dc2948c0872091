"""Documents: store a contract once (text, PDF or DOCX), read its metadata and a PDF's page
images, start an extraction run on it, delete it."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from docpipe.state.db import Session
from docpipe.state.documents import (
    StoredDocument,
    delete_document,
    document_text,
    put_document,
    put_file,
)
from docpipe_api import actions
from docpipe_api.bodies import DocumentUploadDep, ExtractRequestDep, Upload
from docpipe_api.deps import CallerDep, DatabaseDep, IdempotencyKeyDep, ResourcesDep, TenantDep
from docpipe_api.errors import error_responses
from docpipe_api.links import follow
from docpipe_api.review_schemas import DocumentTextOut
from docpipe_api.schemas import (
    DOCUMENT_ID_ECMA,
    NO_NUL,
    DocumentOut,
    DocumentTextIn,
    ExtractAcceptedOut,
    ExtractIn,
    request_body_schema,
)

__all__ = ["router"]

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
            "application/json": {"schema": DocumentTextIn.model_json_schema()},
            # A file's bytes; the API reads the format from them, under any media type.
            PDF_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
            DOCX_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    }
}
_EXTRACT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": request_body_schema(ExtractIn)}},
    }
}


_RUN_LINKS = follow("run_id", "run_id", "read_run", "cancel_run", "retry_run", "stream_run_events")
_DOCUMENT_LINKS = follow(
    "document_id", "id", "read_document", "start_extraction", "remove_document"
)


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
def read_document(
    document_id: DocumentIdPath, resources: ResourcesDep, caller: CallerDep
) -> DocumentOut:
    return actions.read_document(resources=resources, caller=caller, document_id=document_id)


@router.get(
    "/documents/{document_id}/pages/{page}",
    response_class=Response,
    summary="A PDF's or an image's page as a PNG, upright, as evidence boxes are placed on it",
    responses={
        200: {
            "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
            "description": "The page, at most DOCPIPE_PAGE_IMAGE_MAX_PIXELS pixels",
        },
        **error_responses(404, 409, 422, 503),
    },
)
async def read_page_image(
    document_id: DocumentIdPath,
    page: Annotated[int, Path(ge=1, le=100_000, description="1-based page")],
    resources: ResourcesDep,
    caller: CallerDep,
) -> Response:
    """Rendered the first time it is asked for, then kept. 404 for a text or DOCX document
    (no page images) and for a page past the end; 409 until a run has read the pages."""
    return await actions.read_page_image(
        resources=resources, caller=caller, document_id=document_id, page=page
    )


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
    response_model=ExtractAcceptedOut,
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
    resources: ResourcesDep,
    caller: CallerDep,
    response: Response,
) -> ExtractAcceptedOut:
    """The same Idempotency-Key returns the same run; with other options it is a 409."""
    accepted = actions.start_extraction(
        resources=resources,
        caller=caller,
        document_id=document_id,
        options=options,
        idempotency_key=key,
    )
    response.headers["Location"] = f"/runs/{accepted.run_id}"
    return accepted


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
    return DocumentTextOut(
        document_id=document_id,
        format=found.format,
        pages=len(found.page_starts),
        page_starts=found.page_starts,
        page=page,
        start=start,
        text=text,
    )
