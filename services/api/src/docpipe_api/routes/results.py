"""A batch's results in bulk: JSON lines (one per run), CSV or XLSX (one row per document),
in the order the documents were sent, streamed from a server-side cursor as they are read,
resumable after the last run a client got (docs/guides/results-export.md, "Results
export")."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from docpipe.state import results
from docpipe.statuses import RunStatus
from docpipe_api import actions
from docpipe_api.deps import CallerDep, ResourcesDep
from docpipe_api.errors import error_responses
from docpipe_api.results_export import JSONL_MEDIA_TYPE, OMITTED_HEADER
from docpipe_api.schemas import ResultLineOut, request_body_schema
from docpipe_api.xlsx import MEDIA_TYPE as XLSX_MEDIA_TYPE

__all__ = ["router"]

router = APIRouter(tags=["batches"])

# JSON lines, described as the array of its lines (tests/support/schemathesis_hooks.py
# reads them so).
_LINES_SCHEMA = {
    "type": "array",
    "description": "one JSON object per line, each line one run, in the order the documents "
    "were sent",
    "items": request_body_schema(ResultLineOut),
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
    summary="Every run's outputs, values with evidence, cost and error, as JSON lines, CSV or XLSX",
    responses={
        200: {
            "description": "JSON lines (one per run) or CSV (a row of titles, then one row "
            "per document) or XLSX (a values sheet: titles, paths, a row per document; an "
            "evidence sheet: a row per value), in the order the documents were sent; "
            f"{OMITTED_HEADER} names the fields a CSV or XLSX has no column for, and why",
            "content": {
                JSONL_MEDIA_TYPE: {"schema": _LINES_SCHEMA},
                "text/csv": {"schema": {"type": "string"}},
                XLSX_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
            },
            "headers": {OMITTED_HEADER: {"schema": {"type": "string"}}},
        },
        **error_responses(404, 409, 422, 503),
    },
)
def export_batch_results(
    batch_id: str,
    resources: ResourcesDep,
    caller: CallerDep,
    format: Literal["jsonl", "csv", "xlsx"] = "jsonl",
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
    evidence: Annotated[
        bool,
        Query(
            description="CSV and XLSX: each value's quote, page and what its evidence says "
            "(supported, quote found, value not in it, quote not in the document, corrected "
            "by NAME) in columns after it"
        ),
    ] = False,
) -> StreamingResponse:
    """Everything is checked before the first byte: an answer that starts is a 200 whose
    body ends complete, or breaks off (the connection drops) for the client to resume."""
    return actions.export_batch_results(
        resources=resources,
        caller=caller,
        batch_id=batch_id,
        format=format,
        status=status,
        after=str(after) if after else None,
        evidence=evidence,
    )
