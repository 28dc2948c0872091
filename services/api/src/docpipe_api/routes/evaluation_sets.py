"""Evaluation sets: create one, add expected outputs (an upload of JSON lines, or reviews
promoted), read its items by version. Thin: each route calls one action."""

from __future__ import annotations

import resource
import tempfile
from functools import partial
from typing import Annotated, Literal, TypeVar

from anyio.to_thread import run_sync
from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from pydantic import BaseModel
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from docpipe.errors import InvalidRequestError
from docpipe_api import actions
from docpipe_api.bodies import (
    Refusal,
    Upload,
    capped_stream,
    judged_file,
    parsed_json,
    read_capped,
    require_json,
    spool_capped,
)
from docpipe_api.deps import CallerDep, ResourcesDep
from docpipe_api.errors import error_responses
from docpipe_api.evaluation_schemas import (
    SET_NAME_PATTERN,
    EvaluationSetIn,
    EvaluationSetOut,
    EvaluationSetsOut,
    PromoteIn,
    SetItemsOut,
)
from docpipe_api.resources import Caller, Resources
from docpipe_api.schemas import DOCUMENT_ID_ECMA, request_body_schema

__all__ = ["router"]

router = APIRouter(tags=["evaluations"])

_SMALL_BODY = 64 * 1024
_SPOOL_BYTES = 1024 * 1024  # an upload past this goes to a temporary file
JSON_LINES = ("application/jsonl", "application/x-ndjson", "application/json-lines")
MULTIPART = "multipart/form-data"
ITEMS_PART = "items"
_Body = TypeVar("_Body", bound=BaseModel)
SetRef = Annotated[str, Path(pattern=SET_NAME_PATTERN, description="a set's name or id")]


async def _body(request: Request, model: type[_Body]) -> _Body:
    require_json(request)
    return parsed_json(model, await read_capped(request, _SMALL_BODY))


@router.post(
    "/evaluation-sets",
    response_model=EvaluationSetOut,
    status_code=201,
    summary="Create an evaluation set (the same name, pipeline and step again: the set)",
    responses=error_responses(409, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request_body_schema(EvaluationSetIn)}},
        }
    },
)
async def create_evaluation_set(
    request: Request, response: Response, resources: ResourcesDep, caller: CallerDep
) -> EvaluationSetOut:
    wanted = await _body(request, EvaluationSetIn)
    created, new = await run_sync(
        partial(actions.create_evaluation_set, resources=resources, caller=caller, wanted=wanted)
    )
    response.status_code = 201 if new else 200
    response.headers["Location"] = f"/evaluation-sets/{created.id}"
    return created


@router.get(
    "/evaluation-sets",
    response_model=EvaluationSetsOut,
    summary="The tenant's evaluation sets, by name",
    responses=error_responses(422),
)
def list_evaluation_sets(resources: ResourcesDep, caller: CallerDep) -> EvaluationSetsOut:
    return actions.evaluation_sets(resources=resources, caller=caller)


@router.get(
    "/evaluation-sets/{set_ref}",
    response_model=EvaluationSetOut,
    summary="One evaluation set, by name or id",
    responses=error_responses(404, 422),
)
def read_evaluation_set(
    set_ref: SetRef, resources: ResourcesDep, caller: CallerDep
) -> EvaluationSetOut:
    return actions.evaluation_set(resources=resources, caller=caller, set_ref=set_ref)


@router.get(
    "/evaluation-sets/{set_ref}/items",
    response_model=SetItemsOut,
    summary="A set's items (of its current version, or of an earlier one), by document id",
    responses=error_responses(404, 422),
)
def read_evaluation_set_items(
    set_ref: SetRef,
    resources: ResourcesDep,
    caller: CallerDep,
    version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    after: Annotated[
        str, Query(pattern=DOCUMENT_ID_ECMA, description="next_after of the page before")
    ] = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> SetItemsOut:
    return actions.evaluation_set_items(
        resources=resources,
        caller=caller,
        set_ref=set_ref,
        version=version,
        after=after,
        limit=limit,
    )


@router.post(
    "/evaluation-sets/{set_ref}/items",
    response_model=EvaluationSetOut,
    summary="Add expected outputs from JSON lines: the set's next version",
    description=(
        'One item a line: {"document": "<id>", "expected": {...}}, or {"document": {"id", '
        '"text"}, "expected": {...}} for a new text document. The upload is read to a '
        "temporary file as it arrives and stored in chunks in one transaction: every item "
        "fits the step's output schema and names a document the tenant has, or nothing "
        "changes (422 with each error's line and JSON path; 404 naming the documents). A "
        "document named on several lines: the last one counts. With files (PDF, DOCX, "
        "images): multipart/form-data, the lines as the file part `items` and each file as "
        'a file part of its own, named by a line\'s {"document": {"id", "file": "<part>"}}; '
        "each is held to what PUT /documents/{id} holds a file to (its format's size limit, "
        "format from its bytes, zip and image checks) and stored as it stores it, in the "
        "same transaction. A line naming no part or a refused file (413, 415, 422 naming the "
        "line), or a part no line names (422): nothing is stored. The whole body counts "
        "against DOCPIPE_MAX_EVALUATION_UPLOAD_BYTES; at most DOCPIPE_MAX_EVALUATION_ITEMS "
        "files, and a quarter of the API process' open-file limit (more: 422)."
    ),
    responses=error_responses(404, 409, 413, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/jsonl": {"schema": {"type": "string"}},
                MULTIPART: {
                    "schema": {
                        "type": "object",
                        "required": [ITEMS_PART],
                        "properties": {ITEMS_PART: {"type": "string", "format": "binary"}},
                        "additionalProperties": {"type": "string", "format": "binary"},
                    }
                },
            },
        }
    },
)
async def upload_evaluation_set_items(
    set_ref: SetRef,
    request: Request,
    resources: ResourcesDep,
    caller: CallerDep,
    source: Annotated[
        Literal["upload", "samples"], Query(description="samples: made by the sample generator")
    ] = "upload",
) -> EvaluationSetOut:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == MULTIPART:
        return await _upload_with_files(request, resources, caller, set_ref, source)
    if kind not in JSON_LINES:
        raise HTTPException(415, f"send JSON lines ({', '.join(JSON_LINES)}) or {MULTIPART}")
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as spooled:
        await spool_capped(request, spooled, resources.settings.max_evaluation_upload_bytes)
        spooled.seek(0)
        return await run_sync(
            partial(
                actions.add_evaluation_set_items,
                resources=resources,
                caller=caller,
                set_ref=set_ref,
                lines=spooled,
                source=source,
            )
        )


class _PartsOnDisk(MultiPartParser):
    # Every part to disk from its first byte: a set of many small files must not add up in
    # the API's memory.
    spool_max_size = 1


def _most_files(max_items: int) -> int:
    """The files one upload may send: a part holds an open temporary file until the upload
    is stored, so at most a quarter of the process' descriptors (an upload past them would
    fail half-read) and no more than a set may hold."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max_items if soft == resource.RLIM_INFINITY else min(max_items, soft // 4)


async def _upload_with_files(
    request: Request, resources: Resources, caller: Caller, set_ref: str, source: str
) -> EvaluationSetOut:
    """The lines (part ``items``) and the files they name (the other parts), spooled to
    disk as they arrive, each file judged as a document's body is, then stored together."""
    settings = resources.settings
    most = _most_files(settings.max_evaluation_items)
    parser = _PartsOnDisk(
        request.headers,
        capped_stream(request, settings.max_evaluation_upload_bytes),
        max_files=most + 1,  # and the lines
        max_fields=0,  # every part a file part: a field would be held in memory
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidRequestError(
            f"the multipart body is refused: {exc.message} (every part a file part, the "
            f"lines and at most {most} files)"
        ) from None
    try:
        parts = {name: part for name, part in form.multi_items() if isinstance(part, UploadFile)}
        if len(parts) != len(form.multi_items()):
            raise InvalidRequestError("each part needs a name of its own")
        lines = parts.pop(ITEMS_PART, None)
        if lines is None:
            raise InvalidRequestError(f"send the JSON lines as the file part {ITEMS_PART!r}")
        files: dict[str, Upload | Refusal] = {}
        for name, part in parts.items():
            files[name] = await judged_file(part.file, resources, part.content_type)
        return await run_sync(
            partial(
                actions.add_evaluation_set_items,
                resources=resources,
                caller=caller,
                set_ref=set_ref,
                lines=lines.file,
                source=source,
                files=files,
            )
        )
    finally:
        await form.close()


@router.post(
    "/evaluation-sets/{set_ref}/promote",
    response_model=EvaluationSetOut,
    summary="Make what a person approved the expected output: one run, or a batch's runs",
    responses=error_responses(404, 409, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request_body_schema(PromoteIn)}},
        }
    },
)
async def promote_reviews(
    set_ref: SetRef, request: Request, resources: ResourcesDep, caller: CallerDep
) -> EvaluationSetOut:
    promote = await _body(request, PromoteIn)
    return await run_sync(
        partial(
            actions.promote_reviews,
            resources=resources,
            caller=caller,
            set_ref=set_ref,
            promote=promote,
        )
    )
