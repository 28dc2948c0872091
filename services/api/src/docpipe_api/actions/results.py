"""A batch's results in bulk, streamed as they are read, resumable after the last run a
client got (docs/guides/results-export.md, "Results export")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

from fastapi import HTTPException
from fastapi.responses import StreamingResponse

from docpipe.state import batches, results
from docpipe.state.results import BatchResult
from docpipe_api.resources import Caller, Resources
from docpipe_api.results_export import (
    CSV_MEDIA_TYPE,
    JSONL_MEDIA_TYPE,
    OMITTED_HEADER,
    CsvRows,
    Export,
    XlsxRows,
    csv_columns,
    header_value,
    jsonl,
    status_names,
    streamed,
)
from docpipe_api.xlsx import MEDIA_TYPE as XLSX_MEDIA_TYPE

__all__ = ["export_batch_results"]

# An export slot frees when another download ends: seconds to minutes.
_BUSY_RETRY_AFTER_S = 10


def export_batch_results(
    *,
    resources: Resources,
    caller: Caller,
    batch_id: str,
    format: Literal["jsonl", "csv", "xlsx"] = "jsonl",
    status: str | None = None,
    after: str | None = None,
    evidence: bool = False,
) -> StreamingResponse:
    """Every run's outputs, values with evidence, cost and error, as JSON lines, CSV or
    XLSX, in the order the documents were sent (``status``: comma-separated result types or
    run statuses; ``after``: the last run a client got; ``evidence``: the CSV's and the
    values sheet's evidence columns). Everything is checked before the first byte: an
    answer that starts is a 200 whose body ends complete, or breaks off (the connection
    drops) for the client to resume. 503 while the process streams as many exports as it
    may."""
    db, tenant = resources.database, caller.tenant
    progress = batches.batch_progress(db, tenant, batch_id)  # 404 for another tenant's
    statuses = results.run_statuses_named(status_names(status)) if status else ()
    resume = results.check_resume_cursor(db, tenant, batch_id, after) if after else None
    headers: dict[str, str] = {}
    finish: Callable[[], Iterator[bytes]] | None = None
    close: Callable[[], None] | None = None
    render: Callable[[list[BatchResult]], bytes]
    if format in ("csv", "xlsx"):
        columns = csv_columns(resources.pipelines, progress.pipeline, evidence=evidence)
        if columns.omitted:
            headers[OMITTED_HEADER] = header_value(", ".join(map(str, columns.omitted)))
        headers["Content-Disposition"] = f'attachment; filename="batch-{batch_id}.{format}"'
        if format == "csv":
            render, media_type = CsvRows(columns), CSV_MEDIA_TYPE
        else:
            book = XlsxRows(columns)
            render, finish, close, media_type = book, book.finish, book.close, XLSX_MEDIA_TYPE
        head = render([])
    else:
        render, head, media_type = jsonl, b"", JSONL_MEDIA_TYPE
    slots = resources.export_slots
    if not slots.acquire(blocking=False):
        if close is not None:
            close()
        raise HTTPException(
            503,
            "this API process streams as many results exports as it may "
            "(DOCPIPE_MAX_RESULT_EXPORTS); retry",
            headers={"Retry-After": str(_BUSY_RETRY_AFTER_S)},
        )
    chunks = results.batch_results(db, tenant, batch_id, statuses=statuses, after=resume)
    body = streamed(chunks, render, head, finish=finish, close=close)
    return Export(body, slots, media_type=media_type, headers=headers)
