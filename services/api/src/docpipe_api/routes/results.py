"""A batch's results in bulk: JSON lines (one per run) or CSV (one row per document),
streamed from a server-side cursor as they are read, resumable after the last run a client
got (README, "Results export")."""

from __future__ import annotations

import csv
import io
import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Generator
from datetime import datetime
from typing import Annotated, Any, Literal

from anyio import CancelScope
from anyio.to_thread import run_sync
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.pipelines.catalog import Catalog
from docpipe.pipelines.columns import Columns, cell_text, result_columns
from docpipe.pipelines.evidence import evidence_records
from docpipe.state import batches, results
from docpipe.state.results import BatchResult
from docpipe.statuses import RunStatus
from docpipe_api.deps import DatabaseDep, ExportSlotsDep, PipelinesDep, TenantDep
from docpipe_api.errors import error_responses
from docpipe_api.schemas import ResultLine, request_body_schema

__all__ = ["JSONL_MEDIA_TYPE", "OMITTED_HEADER", "router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["batches"])

JSONL_MEDIA_TYPE = "application/x-ndjson"
CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
# The fields a CSV has no column for, and why: "name (why), name (why)".
OMITTED_HEADER = "X-Docpipe-Omitted-Fields"
# The columns every CSV starts with, before the pipeline's fields.
CSV_RUN_COLUMNS = (
    "document_id", "position", "run_id", "result", "status", "cost_usd", "error",
    "review_reason", "decision", "decided_by",
)  # fmt: skip
# An export slot frees when another download ends: seconds to minutes.
_BUSY_RETRY_AFTER_S = 10

# JSON lines, described as the array of its lines (tests/schemathesis_hooks.py reads them so).
_LINES_SCHEMA = {
    "type": "array",
    "description": "one JSON object per line, each line one run, in run id order",
    "items": request_body_schema(ResultLine),
}
_STATUS_NAME = "|".join(dict.fromkeys([*results.ResultType, *RunStatus]))
_STATUS_PATTERN = f"^({_STATUS_NAME})(,({_STATUS_NAME})){{0,{results.MAX_STATUS_NAMES - 1}}}$"
_STATUS_HELP = (
    "only these, comma-separated: result types (succeeded, failed, needs_review, cancelled, "
    "pending; failed is every failed status: failed, budget_exceeded, expired) or run statuses"
)


@router.get(
    "/batches/{batch_id}/results",
    response_class=StreamingResponse,
    summary="Every run's outputs, values with evidence, cost and error, as JSON lines or CSV",
    responses={
        200: {
            "description": "JSON lines (one per run, in run id order) or CSV (a header row, "
            f"then one row per document); {OMITTED_HEADER} names the fields a CSV has no "
            "column for, and why",
            "content": {
                JSONL_MEDIA_TYPE: {"schema": _LINES_SCHEMA},
                "text/csv": {"schema": {"type": "string"}},
            },
            "headers": {OMITTED_HEADER: {"schema": {"type": "string"}}},
        },
        **error_responses(404, 409, 422, 503),
    },
)
def export_batch_results(
    batch_id: str,
    db: DatabaseDep,
    pipelines: PipelinesDep,
    slots: ExportSlotsDep,
    tenant: TenantDep,
    format: Literal["jsonl", "csv"] = "jsonl",
    status: Annotated[
        str | None, Query(description=_STATUS_HELP, json_schema_extra={"pattern": _STATUS_PATTERN})
    ] = None,
    after: Annotated[
        uuid.UUID | None,
        Query(
            description="the run_id of the last line (or row) you got: the runs after it, "
            "to resume an interrupted download (a run of another batch: 409)"
        ),
    ] = None,
) -> StreamingResponse:
    """Everything is checked before the first byte: an answer that starts is a 200 whose
    body ends complete, or breaks off (the connection drops) for the client to resume."""
    progress = batches.batch_progress(db, tenant, batch_id)  # 404 for another tenant's
    statuses = results.run_statuses_named(_status_names(status)) if status else ()
    resume = results.check_resume_cursor(db, tenant, batch_id, str(after)) if after else None
    headers: dict[str, str] = {}
    if format == "csv":
        columns = _csv_columns(pipelines, progress.pipeline)
        if columns.omitted:
            headers[OMITTED_HEADER] = _header_value(", ".join(map(str, columns.omitted)))
        render: Callable[[list[BatchResult]], bytes] = _CsvRows(columns)
        head, media_type = render([]), CSV_MEDIA_TYPE
        headers["Content-Disposition"] = f'attachment; filename="batch-{batch_id}.csv"'
    else:
        render, head, media_type = _jsonl, b"", JSONL_MEDIA_TYPE
    if not slots.acquire(blocking=False):
        raise HTTPException(
            503,
            "this API process streams as many results exports as it may "
            "(DOCPIPE_MAX_RESULT_EXPORTS); retry",
            headers={"Retry-After": str(_BUSY_RETRY_AFTER_S)},
        )
    chunks = results.batch_results(db, tenant, batch_id, statuses=statuses, after=resume)
    return _Export(_streamed(chunks, render, head), slots, media_type=media_type, headers=headers)


class _Export(StreamingResponse):
    """A streamed export that gives its slot back however the response ends: sent whole,
    broken off, or never begun (a client gone before the first byte, when the body is never
    iterated and its own ``finally`` never runs)."""

    def __init__(self, body: AsyncIterator[bytes], slots: threading.Semaphore,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(body, **kwargs)
        self._slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slots.release()


def _status_names(status: str) -> list[str]:
    names = status.split(",")
    if len(names) > results.MAX_STATUS_NAMES:
        raise InvalidRequestError(
            f"status: {len(names)} names; at most {results.MAX_STATUS_NAMES} (each name once)"
        )
    return names


def _csv_columns(pipelines: Catalog, pipeline_key: str) -> Columns:
    """The pipeline's columns; ConflictError when it is not loaded here any more or has no
    field a column can hold (naming the fields and why)."""
    pipeline = pipelines.by_key.get(pipeline_key)
    if pipeline is None:
        raise ConflictError(
            f"the batch ran {pipeline_key}, which this deployment does not load any more: its "
            "columns are unknown; ask for format=jsonl"
        )
    columns = result_columns(pipeline)
    if not columns.columns:
        raise ConflictError(
            f"{pipeline_key}'s output has no field a CSV column can hold: "
            f"{', '.join(map(str, columns.omitted))}; ask for format=jsonl"
        )
    return columns


def _header_value(text: str) -> str:
    """``text`` as an HTTP header value (latin-1): other characters as \\uXXXX escapes."""
    return text.encode("ascii", "backslashreplace").decode("ascii")


async def _streamed(
    chunks: Generator[list[BatchResult]],
    render: Callable[[list[BatchResult]], bytes],
    head: bytes,
) -> AsyncIterator[bytes]:
    """The rendered chunks, each read and rendered in a worker thread. A failure mid-way is
    raised, never swallowed: the connection then drops without the body's end, which the
    client sees as an interrupted download (and resumes), not as a complete one."""

    def next_block() -> bytes | None:
        chunk = next(chunks, None)
        return None if chunk is None else render(chunk)

    try:
        if head:
            yield head
        while (block := await run_sync(next_block)) is not None:
            yield block
    except Exception as exc:
        log.warning("results export broke off: %s: %s", type(exc).__name__, exc)
        raise
    finally:
        # Also when the client went away and this generator is being cancelled (a chunk
        # being read in its thread is read to the end first: run_sync is not cancellable).
        with CancelScope(shield=True):
            await run_sync(chunks.close)


def _jsonl(chunk: list[BatchResult]) -> bytes:
    return "".join(
        json.dumps(_line(r), ensure_ascii=False, separators=(",", ":"), default=_json_value) + "\n"
        for r in chunk
    ).encode()


def _json_value(value: Any) -> Any:
    """What json cannot write itself: the decisions' times."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} in a results line")


def _line(r: BatchResult) -> dict[str, Any]:
    """One run, shaped like a provider batch API's result line (an id the client chose, a
    typed result)."""
    done = {step: output for step, output in r.outputs.items() if output is not None}
    return {
        "custom_id": r.document_id,
        "run_id": r.run_id,
        "document_id": r.document_id,
        "position": r.position,
        "status": r.status,
        "result": {
            "type": r.result_type,
            "outputs": r.outputs,
            "values": evidence_records(done),
        },
        "review": r.review,
        "decisions": r.decisions,
        "cost_usd": float(r.cost_usd),
        "error": r.error,
        "created_at": r.created_at.isoformat(),
        "finished_at": r.finished_at.isoformat() if r.finished_at else None,
    }


class _CsvRows:
    """Renders chunks of runs as CSV rows under the pipeline's columns; an empty chunk is
    the header row."""

    def __init__(self, columns: Columns) -> None:
        self._columns = columns.columns

    def __call__(self, chunk: list[BatchResult]) -> bytes:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        if not chunk:
            writer.writerow([*CSV_RUN_COLUMNS, *(c.name for c in self._columns)])
        for r in chunk:
            last = r.decisions[-1] if r.decisions else {}
            writer.writerow(
                [
                    cell_text(r.document_id),
                    cell_text(r.position),
                    r.run_id,
                    r.result_type,
                    r.status,
                    cell_text(float(r.cost_usd)),
                    cell_text(r.error),
                    cell_text(r.review and r.review["reason"]),
                    cell_text(last.get("action")),
                    cell_text(last.get("reviewer_name")),
                    *(c.cell(r.outputs) for c in self._columns),
                ]
            )
        return buffer.getvalue().encode()
