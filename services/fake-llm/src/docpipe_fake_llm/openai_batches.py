"""OpenAI's batch interface: ``/v1/files`` (the JSONL input, the output and error files) and
``/v1/batches`` (create, retrieve, list, cancel), as its API reference describes them.

Validation is OpenAI's: a batch's input file must be a ``batch`` file of JSON lines, each
``{"custom_id", "method": "POST", "url": <the batch's endpoint>, "body"}`` with a unique
custom_id, all lines for one model, at most ``batch_max_requests`` of them; a file larger than
``batch_max_bytes`` is refused at upload. A batch whose file breaks these rules is created and
then ``failed``, with the lines at fault in its ``errors``.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from docpipe_fake_llm.batch_points import at_point
from docpipe_fake_llm.batch_store import BatchLine, FakeBatch, FakeFile
from docpipe_fake_llm.protocol import error_body
from docpipe_fake_llm.provider import FakeProvider
from docpipe_fake_llm.replies import json_response

__all__ = ["parse_window", "router"]

router = APIRouter(prefix="/v1")

ENDPOINTS = ("/v1/chat/completions",)
_WINDOW = re.compile(r"^(\d{1,6})([smh])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}


def _provider(request: Request) -> FakeProvider:
    provider: FakeProvider = request.app.state.provider
    return provider


ProviderDep = Annotated[FakeProvider, Depends(_provider)]


def _refused(status: int, message: str, code: str) -> Response:
    return json_response(status, error_body(message, "invalid_request_error", code))


def _unauthorized() -> Response:
    return json_response(
        401, error_body("Incorrect API key provided", "invalid_request_error", "invalid_api_key")
    )


def parse_window(text: str) -> float | None:
    """Seconds of a completion window such as ``24h`` (OpenAI's only one) or ``20s``."""
    match = _WINDOW.match(text)
    return int(match[1]) * _UNIT_S[match[2]] if match and int(match[1]) > 0 else None


# --- files --------------------------------------------------------------------------------


@router.post("/files")
async def upload_file(request: Request, provider: ProviderDep) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    body = await request.body()
    if len(body) > provider.config.batch_max_bytes + 64 * 1024:
        return _refused(400, "File is too large", "file_too_large")
    try:
        form = _multipart(request.headers.get("content-type", ""), body)
    except ValueError as exc:
        return _refused(400, str(exc), "invalid_multipart")
    purpose, upload = form.get("purpose"), form.get("file")
    if purpose is None or upload is None:
        return _refused(400, "a file upload needs 'purpose' and 'file'", "missing_field")
    filename, data = upload
    if purpose[1] != b"batch":
        return _refused(400, "this provider stores only files of purpose 'batch'", "bad_purpose")
    if len(data) > provider.config.batch_max_bytes:
        return _refused(
            400,
            f"File is too large: {len(data)} bytes, at most {provider.config.batch_max_bytes}",
            "file_too_large",
        )

    def store() -> Response:
        return json_response(200, _file_object(provider.batches.add_file(filename, "batch", data)))

    return await at_point(provider, request, "upload", store)


@router.get("/files")
async def list_files(
    request: Request,
    provider: ProviderDep,
    purpose: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    files = [f for f in reversed(provider.batches.files.values()) if purpose in (None, f.purpose)]

    def listing() -> Response:
        return json_response(200, _page([_file_object(f) for f in files], after, limit))

    return await at_point(provider, request, "list", listing)


@router.get("/files/{file_id}")
async def retrieve_file(file_id: str, request: Request, provider: ProviderDep) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    found = provider.batches.files.get(file_id)
    if found is None:
        return _refused(404, f"No such File object: {file_id}", "not_found")
    return json_response(200, _file_object(found))


@router.get("/files/{file_id}/content")
async def file_content(file_id: str, request: Request, provider: ProviderDep) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    found = provider.batches.files.get(file_id)
    if found is None:
        return _refused(404, f"No such File object: {file_id}", "not_found")

    def download() -> Response:
        return Response(found.data, media_type="application/octet-stream")

    return await at_point(provider, request, "download", download)


@router.delete("/files/{file_id}")
async def delete_file(file_id: str, request: Request, provider: ProviderDep) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    if provider.batches.files.pop(file_id, None) is None:
        return _refused(404, f"No such File object: {file_id}", "not_found")
    return json_response(200, {"id": file_id, "object": "file", "deleted": True})


# --- batches ------------------------------------------------------------------------------


@router.post("/batches")
async def create_batch(request: Request, provider: ProviderDep) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    try:
        asked = json.loads(await request.body())
    except ValueError:
        return _refused(400, "request body is not valid JSON", "invalid_json")
    if not isinstance(asked, dict):
        return _refused(400, "request body must be a JSON object", "invalid_body")
    endpoint, window = asked.get("endpoint"), asked.get("completion_window")
    if endpoint not in ENDPOINTS:
        return _refused(400, f"endpoint must be one of {list(ENDPOINTS)}", "invalid_endpoint")
    window_s = parse_window(window) if isinstance(window, str) else None
    if window_s is None:
        return _refused(400, "completion_window must look like 24h", "invalid_completion_window")
    metadata = asked.get("metadata")
    if metadata is not None and (problem := _metadata_problem(metadata)):
        return _refused(400, problem, "invalid_metadata")
    source = provider.batches.files.get(str(asked.get("input_file_id")))
    if source is None or source.purpose != "batch":
        return _refused(400, "input_file_id names no file of purpose 'batch'", "invalid_file")
    lines, errors = _read_input(source.data, endpoint, provider.config.batch_max_requests)

    def create() -> Response:
        batch = provider.batches.create(
            "openai",
            lines,
            window_s=window_s,
            errors=errors,
            completion_window=window,
            endpoint=endpoint,
            input_file_id=source.id,
            metadata=metadata,
        )
        return json_response(200, batch_object(batch))

    return await at_point(provider, request, "create", create)


@router.get("/batches")
async def list_batches(
    request: Request,
    provider: ProviderDep,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    batches = [batch_object(b) for b in provider.batches.listed("openai")]

    def listing() -> Response:
        return json_response(200, _page(batches, after, limit))

    return await at_point(provider, request, "list", listing)


@router.get("/batches/{batch_id}")
async def retrieve_batch(batch_id: str, request: Request, provider: ProviderDep) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    batch = provider.batches.batches.get(batch_id)
    if batch is None or batch.api != "openai":
        return _refused(404, f"No batch found with id '{batch_id}'", "not_found")
    return await at_point(
        provider, request, "retrieve", lambda: json_response(200, batch_object(batch))
    )


@router.post("/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, request: Request, provider: ProviderDep) -> Response:
    if not provider.is_authorized(request.headers.get("authorization")):
        return _unauthorized()
    batch = provider.batches.batches.get(batch_id)
    if batch is None or batch.api != "openai":
        return _refused(404, f"No batch found with id '{batch_id}'", "not_found")

    def cancel() -> Response:
        provider.batches.cancel(batch)
        return json_response(200, batch_object(batch))

    return await at_point(provider, request, "cancel", cancel)


def batch_object(batch: FakeBatch) -> dict[str, Any]:
    """A batch as OpenAI's API shows it."""
    counts = batch.counts()
    failed = counts["errored"] + counts["expired"] + counts["cancelled"]

    def at(status: str) -> int | None:
        when = batch.times.get(status)
        return int(when) if when is not None else None

    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": int(batch.created_at),
        "in_progress_at": at("in_progress"),
        "expires_at": int(batch.expires_at),
        "finalizing_at": at("finalizing"),
        "completed_at": at("completed"),
        "failed_at": at("failed"),
        "expired_at": at("expired"),
        "cancelling_at": at("cancelling"),
        "cancelled_at": at("cancelled"),
        "request_counts": {
            "total": len(batch.lines),
            "completed": counts["succeeded"],
            "failed": failed,
        },
        "metadata": batch.metadata,
    }


def _file_object(stored: FakeFile) -> dict[str, Any]:
    return {
        "id": stored.id,
        "object": "file",
        "bytes": len(stored.data),
        "created_at": stored.created_at,
        "filename": stored.filename,
        "purpose": stored.purpose,
        "status": "processed",
        "status_details": None,
    }


def _page(items: list[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    """A page of a list newest first, after the item ``after`` (OpenAI's cursor)."""
    start = 0
    if after is not None:
        ids = [item["id"] for item in items]
        start = ids.index(after) + 1 if after in ids else len(items)
    page = items[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(items),
    }


def _metadata_problem(metadata: Any) -> str | None:
    if not isinstance(metadata, dict) or len(metadata) > 16:
        return "metadata is an object of at most 16 pairs"
    for key, value in metadata.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            return "metadata keys have at most 64 characters, values are strings of at most 512"
    return None


def _read_input(
    data: bytes, endpoint: str, max_requests: int
) -> tuple[list[BatchLine], list[dict[str, Any]]]:
    """The requests of an input file, and what validation finds wrong with it."""
    lines: list[BatchLine] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    models: set[str] = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            errors.append(_line_error("invalid_json_line", "This line is not valid JSON", number))
            continue
        problem = _line_problem(entry, endpoint, seen)
        if problem is not None:
            errors.append(_line_error(problem[0], problem[1], number))
            continue
        seen.add(entry["custom_id"])
        models.add(str(entry["body"].get("model")))
        lines.append(BatchLine(entry["custom_id"], entry["body"]))
    if not lines and not errors:
        errors.append(_line_error("empty_file", "The input file holds no request", None))
    if len(lines) > max_requests:
        errors.append(
            _line_error(
                "too_many_requests",
                f"A batch may hold at most {max_requests} requests, this one holds {len(lines)}",
                None,
            )
        )
    if len(models) > 1:
        errors.append(
            _line_error("mixed_models", "All requests of a batch must use the same model", None)
        )
    return lines, errors


def _line_problem(entry: Any, endpoint: str, seen: set[str]) -> tuple[str, str] | None:
    if not isinstance(entry, dict):
        return "invalid_request", "Each line must be a JSON object"
    custom_id = entry.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return "missing_custom_id", "Each request needs a custom_id"
    if custom_id in seen:
        return "duplicate_custom_id", f"The custom_id {custom_id!r} is used twice"
    if entry.get("method") != "POST":
        return "invalid_method", "The method must be POST"
    if entry.get("url") != endpoint:
        return "mismatched_endpoint", f"The url must be the batch's endpoint {endpoint}"
    body = entry.get("body")
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "invalid_body", "The body must be an object naming its model"
    return None


def _line_error(code: str, message: str, line: int | None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": None, "line": line}


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str, bytes]]:
    """The fields of a multipart/form-data body: name -> (filename, bytes)."""
    if not content_type.startswith("multipart/form-data"):
        raise ValueError("a file upload is multipart/form-data")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, tuple[str, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = (str(part.get_filename() or ""), payload)
    if not fields:
        raise ValueError("the multipart body holds no field")
    return fields
