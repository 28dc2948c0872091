"""A batch's results as bytes on the wire: JSON lines (one per run), CSV (one row per
document) or XLSX (docpipe_api.xlsx), rendered chunk by chunk from a server-side cursor,
each export holding one of the process' export slots (DOCPIPE_MAX_RESULT_EXPORTS) until it
ends however it ends."""

from __future__ import annotations

import csv
import io
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from datetime import datetime
from typing import Any

from anyio import CancelScope
from anyio.to_thread import run_sync
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from docpipe.errors import ConflictError, InvalidRequestError
from docpipe.pipelines.catalog import Catalog
from docpipe.pipelines.columns import (
    Column,
    Columns,
    cell_text,
    evidence_by_path,
    evidence_cells,
    field_title,
    readable_value,
    result_columns,
)
from docpipe.pipelines.evidence import evidence_records, support_label
from docpipe.state import results
from docpipe.state.results import BatchResult
from docpipe_api.xlsx import HEADER, PATHS, Sheet, XlsxStream

__all__ = [
    "CSV_MEDIA_TYPE",
    "EVIDENCE_COLUMNS",
    "JSONL_MEDIA_TYPE",
    "OMITTED_HEADER",
    "RUN_COLUMNS",
    "CsvRows",
    "Export",
    "XlsxRows",
    "csv_columns",
    "header_paths",
    "header_titles",
    "header_value",
    "jsonl",
    "run_cells",
    "status_names",
    "streamed",
    "value_cells",
]

log = logging.getLogger(__name__)

JSONL_MEDIA_TYPE = "application/x-ndjson"
CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
# The fields a CSV has no column for, and why: "name (why), name (why)".
OMITTED_HEADER = "X-Docpipe-Omitted-Fields"
# The columns every CSV and values sheet starts with, before the pipeline's fields: the
# JSON lines' name and the title a person reads. "No." is the document's place in the batch
# request, counted from 1 (the JSON lines' position is 0-based).
RUN_COLUMNS = (
    ("document_id", "Document"),
    ("position", "No."),
    ("run_id", "Run ID"),
    ("result", "Result"),
    ("status", "Status"),
    ("cost_usd", "Cost (USD)"),
    ("error", "Error"),
    ("review_reason", "Review reason"),
    ("decision", "Decision"),
    ("decided_by", "Decided by"),
)
# The evidence columns after each value's, when asked for.
EVIDENCE_COLUMNS = ("quote", "page", "evidence")


class Export(StreamingResponse):
    """A streamed export that gives its slot back however the response ends: sent whole,
    broken off, or never begun (a client gone before the first byte, when the body is never
    iterated and its own ``finally`` never runs)."""

    def __init__(
        self, body: AsyncIterator[bytes], slots: threading.Semaphore, **kwargs: Any
    ) -> None:
        super().__init__(body, **kwargs)
        self._slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slots.release()


def status_names(status: str) -> list[str]:
    names = status.split(",")
    if len(names) > results.MAX_STATUS_NAMES:
        raise InvalidRequestError(
            f"status: {len(names)} names; at most {results.MAX_STATUS_NAMES} (each name once)"
        )
    return names


def csv_columns(pipelines: Catalog, pipeline_key: str, *, evidence: bool = False) -> Columns:
    """The pipeline's columns, titled apart from the run's (with the evidence's when
    asked); ConflictError when it is not loaded here any more or has no field."""
    pipeline = pipelines.by_key.get(pipeline_key)
    if pipeline is None:
        raise ConflictError(
            f"the batch ran {pipeline_key}, which this deployment does not load any more: its "
            "columns are unknown; ask for format=jsonl"
        )
    columns = result_columns(pipeline, evidence=evidence, taken=[title for _, title in RUN_COLUMNS])
    if not columns.columns:
        raise ConflictError(f"{pipeline_key}'s output has no field; ask for format=jsonl")
    return columns


def header_value(text: str) -> str:
    """``text`` as an HTTP header value (latin-1): other characters as \\uXXXX escapes."""
    return text.encode("ascii", "backslashreplace").decode("ascii")


async def streamed(
    chunks: Generator[list[BatchResult]],
    render: Callable[[list[BatchResult]], bytes],
    head: bytes,
    finish: Callable[[], Iterator[bytes]] | None = None,
    close: Callable[[], None] | None = None,
) -> AsyncIterator[bytes]:
    """The rendered chunks, each read and rendered in a worker thread, then what ``finish``
    gives (a workbook's end); ``close`` frees what rendering held, however it ended. A
    failure mid-way is raised, never swallowed: the connection then drops without the
    body's end, which the client sees as an interrupted download (and resumes), not as a
    complete one."""

    def next_block() -> bytes | None:
        chunk = next(chunks, None)
        return None if chunk is None else render(chunk)

    try:
        if head:
            yield head
        while (block := await run_sync(next_block)) is not None:
            if block:
                yield block
        if finish is not None:
            ending = finish()
            while (block := await run_sync(next, ending, None)) is not None:
                yield block
    except Exception as exc:
        log.warning("results export broke off: %s: %s", type(exc).__name__, exc)
        raise
    finally:
        # Also when the client went away and this generator is being cancelled (a chunk
        # being read in its thread is read to the end first: run_sync is not cancellable).
        with CancelScope(shield=True):
            await run_sync(chunks.close)
            if close is not None:
                await run_sync(close)


def jsonl(chunk: list[BatchResult]) -> bytes:
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


class CsvRows:
    """Renders chunks of runs as CSV rows under the titled columns; an empty chunk is the
    header row."""

    def __init__(self, columns: Columns) -> None:
        self._columns = columns.columns
        self._evidence = columns.evidence

    def __call__(self, chunk: list[BatchResult]) -> bytes:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        if not chunk:
            writer.writerow(header_titles(self._columns, evidence=self._evidence))
        for r in chunk:
            writer.writerow(
                [cell_text(v) for v in run_cells(r)]
                + [cell_text(v) for v in value_cells(r, self._columns, evidence=self._evidence)]
            )
        return buffer.getvalue().encode()


def header_titles(columns: Sequence[Column], *, evidence: bool) -> list[str]:
    """The titles of the run's columns and of the pipeline's, each followed by its evidence
    columns when asked."""
    titles = [title for _, title in RUN_COLUMNS]
    for column in columns:
        titles.append(column.title)
        if evidence and column.evidence and column.evidence.last:
            titles += [f"{column.evidence.title}: {what}" for what in EVIDENCE_COLUMNS]
    return titles


def header_paths(columns: Sequence[Column], *, evidence: bool) -> list[str]:
    """What each title stands for: the JSON lines' names, the paths of the values."""
    paths = [name for name, _ in RUN_COLUMNS]
    for column in columns:
        paths.append(column.name)
        if evidence and column.evidence and column.evidence.last:
            where = ".".join((column.step, *column.evidence.path))
            paths += [f"{where} ({what})" for what in EVIDENCE_COLUMNS]
    return paths


def run_cells(r: BatchResult) -> list[Any]:
    last = r.decisions[-1] if r.decisions else {}
    return [
        r.document_id,
        None if r.position is None else r.position + 1,
        r.run_id,
        str(r.result_type),
        r.status,
        float(r.cost_usd),
        r.error,
        r.review and r.review["reason"],
        last.get("action"),
        last.get("reviewer_name"),
    ]


def value_cells(r: BatchResult, columns: Sequence[Column], *, evidence: bool) -> list[Any]:
    """The run's values in ``columns`` (readable: lists joined, objects in words), each
    followed by its quote, page and what the evidence says when asked."""
    records = evidence_by_path(r.outputs) if evidence else {}
    cells: list[Any] = []
    for column in columns:
        cells.append(readable_value(column.value(r.outputs)))
        if evidence and column.evidence and column.evidence.last:
            cells += evidence_cells(column, records)
    return cells


# The evidence sheet: one row per value a step recorded evidence for.
EVIDENCE_SHEET_COLUMNS = (
    ("Document", 28),
    ("No.", 6),
    ("Field", 22),
    ("Value", 30),
    ("Quote", 60),
    ("Page", 6),
    ("Section", 20),
    ("Evidence", 28),
    ("Corrected by", 16),
    ("Run ID", 38),
)


class XlsxRows:
    """Renders chunks of runs into an XLSX workbook: a values sheet (a row of titles, a row
    of paths, then a row per document, evidence columns when asked) and an evidence sheet
    (a row per value with its quote, page, section and what the evidence says). An empty
    chunk is the workbook's start; :meth:`finish` its end."""

    def __init__(self, columns: Columns) -> None:
        self._columns = columns.columns
        self._evidence = columns.evidence
        titles = header_titles(self._columns, evidence=self._evidence)
        self._book = XlsxStream(
            [
                Sheet("Values", [min(max(len(t) + 2, 12), 50) for t in titles], 2),
                Sheet("Evidence", [w for _, w in EVIDENCE_SHEET_COLUMNS], 1),
            ]
        )
        self._book.add_row(0, titles, HEADER)
        self._book.add_row(0, header_paths(self._columns, evidence=self._evidence), PATHS)
        self._book.add_row(1, [t for t, _ in EVIDENCE_SHEET_COLUMNS], HEADER)

    def __call__(self, chunk: list[BatchResult]) -> bytes:
        for r in chunk:
            self._book.add_row(
                0, run_cells(r) + value_cells(r, self._columns, evidence=self._evidence)
            )
            number = None if r.position is None else r.position + 1
            for record in evidence_records({s: o for s, o in r.outputs.items() if o is not None}):
                corrected = bool(record.get("corrected"))
                self._book.add_row(
                    1,
                    [
                        r.document_id,
                        number,
                        field_title(record["field"]),
                        readable_value(record.get("value")),
                        None if corrected else record["quote"],
                        None if corrected else record["page"],
                        " ".join(
                            str(s) for s in (record["section"], record.get("section_title")) if s
                        ),
                        support_label(record),
                        record.get("corrected_by") if corrected else None,
                        r.run_id,
                    ],
                )
        return self._book.take()

    def finish(self) -> Iterator[bytes]:
        return self._book.finish()

    def close(self) -> None:
        self._book.close()
