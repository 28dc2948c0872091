"""A small HTTP client for docpipe's API (used by the CLI and the benchmarks).

A 429 (this key's requests per minute) is waited out, as its Retry-After says, and so is a
503 of a read (the database or Redis briefly away); a few times at most, each wait capped,
then the error is the caller's. Nothing else is retried: a write that failed otherwise may
have been done.

Errors are two, and httpx's never pass this module: :class:`ApiError` is the API's answer
(status and its ``detail``), :class:`ApiUnreachable` no answer at all (refused, unknown
host, timed out), naming the URL tried.
"""

from __future__ import annotations

import csv
import io
import json
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from docpipe.backoff import retry_delay

__all__ = [
    "DEFAULT_PIPELINE",
    "MAX_RUN_IDS",
    "ApiError",
    "ApiUnreachable",
    "DocpipeClient",
    "SavedExport",
]

DEFAULT_PIPELINE = "document_extract:v1"
MAX_RUN_IDS = 100  # per GET /runs?ids=...

# Retries of a throttled request, and the longest wait before each (a Retry-After beyond it
# is cut to it): a CLI command never hangs for long, and gives up with the API's answer.
MAX_RETRIES = 5
MAX_WAIT_S = 60.0
_BACKOFF_BASE_S = 0.5
# The results export's header naming the fields it has no column for, and its CSV's run id
# column (docpipe_api.results_export).
OMITTED_HEADER = "X-Docpipe-Omitted-Fields"
RUN_ID_TITLE = "Run ID"


class ApiError(RuntimeError):
    """The API answered with an error: its status, its ``detail`` as one line of text, and
    how many times the request was sent (more than once only for a 429 or a read's 503)."""

    def __init__(self, status: int, detail: str, attempts: int = 1) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.attempts = attempts


class ApiUnreachable(RuntimeError):
    """No answer from the API at ``url``: ``reason`` says why (refused, unknown host,
    timed out)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason


class DocpipeClient:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout_s, transport=transport
        )
        self._sleep = sleep
        self.base_url = base_url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DocpipeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        with self._answer(method, path, stream=False, **kwargs) as response:
            return response.json() if response.content else None

    @contextmanager
    def _answer(
        self, method: str, path: str, *, stream: bool, **kwargs: Any
    ) -> Iterator[httpx.Response]:
        """The first answer that is not throttled (see the module docstring); ApiError for an
        error status. With ``stream``, the body is read by the caller as it arrives."""
        for attempt in range(1, MAX_RETRIES + 2):
            response = self._send(method, path, stream=stream, **kwargs)
            retriable = response.status_code == 429 or (
                response.status_code == 503 and method == "GET"
            )
            if not retriable or attempt > MAX_RETRIES:
                break
            response.close()
            self._sleep(_wait_s(response, attempt))
        try:
            if response.status_code >= 400:
                response.read()
                raise ApiError(response.status_code, _detail(response), attempt)
            yield response
        finally:
            response.close()

    def _send(self, method: str, path: str, *, stream: bool, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.send(self._http.build_request(method, path, **kwargs), stream=stream)
        except httpx.TimeoutException as exc:
            raise ApiUnreachable(self.base_url, "no answer in time") from exc
        except httpx.TransportError as exc:
            raise ApiUnreachable(self.base_url, _reason(exc)) from exc

    def put_document(self, document_id: str, text: str) -> dict[str, Any]:
        return dict(
            self._call(
                "PUT",
                f"/documents/{document_id}",
                content=text.encode(),
                headers={"Content-Type": "text/plain; charset=utf-8"},
            )
        )

    def put_file(self, document_id: str, data: bytes) -> dict[str, Any]:
        """Upload a PDF or DOCX file (the API tells its format from its bytes)."""
        return dict(
            self._call(
                "PUT",
                f"/documents/{document_id}",
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
        )

    def delete_document(self, document_id: str) -> bool:
        """Delete a document and the ended runs on it; False when there was none."""
        try:
            self._call("DELETE", f"/documents/{document_id}")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def extract(
        self, document_id: str, *, idempotency_key: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """Start a run; the same idempotency key returns the same run."""
        key = idempotency_key or uuid.uuid4().hex
        return dict(
            self._call(
                "POST",
                f"/documents/{document_id}/extract",
                json=options,
                headers={"Idempotency-Key": key},
            )
        )

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/runs/{run_id}"))

    def runs(self, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Several runs' status by id, one request per ``MAX_RUN_IDS``; unknown ids are
        left out."""
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(run_ids), MAX_RUN_IDS):
            chunk = ",".join(run_ids[start : start + MAX_RUN_IDS])
            for status in self._call("GET", "/runs", params={"ids": chunk})["runs"]:
                found[status["run_id"]] = status
        return found

    def list_runs(self, **filters: str | None) -> dict[str, Any]:
        """A page of the tenant's runs, newest first (``cursor`` for the next)."""
        params = {k: v for k, v in filters.items() if v is not None}
        return dict(self._call("GET", "/runs", params=params))

    def list_batches(self, **filters: str | None) -> dict[str, Any]:
        """A page of the tenant's batches, newest first, with their progress and cost."""
        params = {k: v for k, v in filters.items() if v is not None}
        return dict(self._call("GET", "/batches", params=params))

    def dashboard(self) -> dict[str, Any]:
        """The tenant's runs by status, review backlog, newest batches and runs."""
        return dict(self._call("GET", "/dashboard"))

    def cancel(self, run_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/runs/{run_id}/cancel"))

    def retry(self, run_id: str, from_step: str | None = None) -> dict[str, Any]:
        params = {"from_step": from_step} if from_step else {}
        return dict(self._call("POST", f"/runs/{run_id}/retry", params=params))

    def reviews(self, **filters: str | None) -> dict[str, Any]:
        """A page of the runs awaiting review, oldest first (``cursor`` for the next)."""
        params = {k: v for k, v in filters.items() if v is not None}
        return dict(self._call("GET", "/reviews", params=params))

    def review(self, run_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/reviews/{run_id}"))

    def decide(self, run_id: str, decision: dict[str, Any]) -> dict[str, Any]:
        """Post a review decision (it names the revision it was made on)."""
        return dict(self._call("POST", f"/runs/{run_id}/review", json=decision))

    def submit_batch(
        self,
        documents: list[dict[str, str]],
        *,
        idempotency_key: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Submit ``[{"id": ..., "text": ...}]`` to the batch lane."""
        key = idempotency_key or uuid.uuid4().hex
        return dict(
            self._call(
                "POST",
                "/batches",
                json={"documents": documents, **options},
                headers={"Idempotency-Key": key},
            )
        )

    def batch(self, batch_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/batches/{batch_id}"))

    def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/batches/{batch_id}/cancel"))

    def save_batch_results(
        self,
        batch_id: str,
        out: IO[bytes],
        *,
        format: str = "jsonl",
        status: str | None = None,
        evidence: bool = False,
    ) -> SavedExport:
        """Write the batch's results export to ``out`` as the API streams it; says the runs
        written and the fields the export left out. When the connection drops mid-way, the
        download goes on after the last run written whole (``after=``), a few times at
        most: each run is in ``out`` once."""
        saved = _SavedResults(out, csv_format=format == "csv")
        params = {"format": format, **_export_params(status, evidence)}
        for attempt in range(1, MAX_RETRIES + 2):
            resume = {"after": saved.after} if saved.after else {}
            try:
                with self._answer(
                    "GET", f"/batches/{batch_id}/results", stream=True, params=params | resume
                ) as answer:
                    saved.start_answer()
                    for block in answer.iter_bytes():
                        saved.receive(block)
                    saved.receive(b"", ended=True)
                return SavedExport(saved.runs, answer.headers.get(OMITTED_HEADER))
            except httpx.TransportError:
                if attempt > MAX_RETRIES:
                    raise
                self._sleep(retry_delay(attempt, base_s=_BACKOFF_BASE_S, cap_s=MAX_WAIT_S))
        raise AssertionError("unreachable")

    def save_batch_workbook(
        self, batch_id: str, out: IO[bytes], *, status: str | None = None, evidence: bool = False
    ) -> SavedExport:
        """Write the batch's results as an XLSX workbook to ``out`` (a file: read back to
        count its rows and cut cells). A workbook cannot be resumed part-way: a download
        that drops starts again, a few times at most."""
        params = {"format": "xlsx", **_export_params(status, evidence)}
        for attempt in range(1, MAX_RETRIES + 2):
            out.seek(0)
            out.truncate()
            try:
                with self._answer(
                    "GET", f"/batches/{batch_id}/results", stream=True, params=params
                ) as answer:
                    for block in answer.iter_bytes():
                        out.write(block)
                out.flush()
                runs, cut = _workbook_counts(out)
                return SavedExport(runs, answer.headers.get(OMITTED_HEADER), cut)
            except httpx.TransportError:
                if attempt > MAX_RETRIES:
                    raise
                self._sleep(retry_delay(attempt, base_s=_BACKOFF_BASE_S, cap_s=MAX_WAIT_S))
        raise AssertionError("unreachable")

    def create_evaluation_set(self, name: str, pipeline: str, step: str) -> dict[str, Any]:
        body = {"name": name, "pipeline": pipeline, "step": step}
        return dict(self._call("POST", "/evaluation-sets", json=body))

    def upload_set_items(self, name: str, lines: IO[bytes], source: str) -> dict[str, Any]:
        """Send a JSON-lines file of expected outputs as it is read."""
        return dict(
            self._call(
                "POST",
                f"/evaluation-sets/{name}/items",
                params={"source": source},
                content=iter(lambda: lines.read(1 << 20), b""),
                headers={"Content-Type": "application/jsonl"},
            )
        )

    def upload_set_files(
        self, name: str, lines: IO[bytes], files: Mapping[str, Path], source: str
    ) -> dict[str, Any]:
        """Send JSON lines and the files they name (by part name) as one multipart body, each
        file read as it goes out."""
        with ExitStack() as opened:
            parts: dict[str, tuple[str, IO[bytes], str]] = {
                "items": ("items.jsonl", lines, "application/jsonl")
            }
            for part, path in files.items():
                body = opened.enter_context(path.open("rb"))
                parts[part] = (path.name, body, "application/octet-stream")
            return dict(
                self._call(
                    "POST", f"/evaluation-sets/{name}/items", params={"source": source}, files=parts
                )
            )

    def promote_reviews(self, name: str, **which: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/evaluation-sets/{name}/promote", json=which))

    def start_evaluation(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._call("POST", "/evaluations", json=body))

    def evaluation(self, evaluation_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/evaluations/{evaluation_id}"))

    def compare_evaluations(
        self, baseline: str, candidate: str, max_drop: float | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"baseline": baseline, "candidate": candidate}
        if max_drop is not None:
            params["max_drop"] = max_drop
        return dict(self._call("GET", "/evaluations/compare", params=params))

    def pipelines(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/pipelines")["pipelines"])

    def pipeline(self, key: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/pipelines/{key}"))

    def rotate_webhook_secret(self, previous_valid_for_s: float | None = None) -> dict[str, Any]:
        """Create the tenant's webhook signing secret, or rotate it; the answer carries the
        secret, the only time it is shown."""
        params = (
            {} if previous_valid_for_s is None else {"previous_valid_for_s": previous_valid_for_s}
        )
        return dict(self._call("POST", "/webhook-secret", params=params))

    def webhook_secret(self) -> dict[str, Any]:
        return dict(self._call("GET", "/webhook-secret"))


@dataclass(frozen=True)
class SavedExport:
    """What a results download wrote: its runs, the fields it has no column for (and why,
    as the API says), and its cells cut at a spreadsheet's limit."""

    runs: int
    omitted: str | None = None
    cut_cells: int = 0


def _export_params(status: str | None, evidence: bool) -> dict[str, str]:
    return ({"status": status} if status else {}) | ({"evidence": "true"} if evidence else {})


def _workbook_counts(book: IO[bytes]) -> tuple[int, int]:
    """(rows of documents, cells cut) of a results workbook: its values sheet's rows below
    the two header rows, and the cut marks in its sheets; read a block at a time."""
    from docpipe.pipelines.columns import CUT_MARK_END

    book.seek(0)
    rows = cut = 0
    with zipfile.ZipFile(book) as archive:
        for index, name in enumerate(("xl/worksheets/sheet1.xml", "xl/worksheets/sheet2.xml")):
            found = _count_in(archive, name, (b"<row ", CUT_MARK_END.encode()))
            rows += found[0] - 2 if index == 0 else 0
            cut += found[1]
    return max(rows, 0), cut


def _count_in(archive: zipfile.ZipFile, name: str, needles: tuple[bytes, ...]) -> list[int]:
    counts = [0] * len(needles)
    overlap = max(len(n) for n in needles) - 1
    tail = b""
    with archive.open(name) as part:
        while block := part.read(1 << 20):
            data = tail + block
            for i, needle in enumerate(needles):
                # The tail is shorter than a needle: a match in data ends in the new block.
                counts[i] += data.count(needle)
            tail = data[-overlap:]
    return counts


class _SavedResults:
    """A results download written record by record: only whole records reach the file, and
    the run id of the last one is where a resumed download starts."""

    def __init__(self, out: IO[bytes], *, csv_format: bool) -> None:
        self._out = out
        self._csv = csv_format
        self._rest = b""
        self._run_id_column: int | None = None  # CSV: from the header
        self._header_due = csv_format  # the first record of every CSV answer is its header
        self.runs = 0
        self.after: str | None = None

    def start_answer(self) -> None:
        self._rest = b""  # a record cut off by a dropped connection comes again whole
        self._header_due = self._csv

    def receive(self, block: bytes, *, ended: bool = False) -> None:
        records, self._rest = _whole_records(self._rest + block, csv_quoting=self._csv)
        if ended and self._rest:
            records, self._rest = [*records, self._rest], b""
        for record in records:
            if self._header_due:
                self._header_due = False
                if self._run_id_column is None:
                    self._run_id_column = _csv_fields(record).index(RUN_ID_TITLE)
                    self._out.write(record)
                continue
            self._out.write(record)
            self.runs += 1
            if self._run_id_column is not None:
                self.after = _csv_fields(record)[self._run_id_column]
            else:
                self.after = str(json.loads(record)["run_id"])


def _whole_records(data: bytes, *, csv_quoting: bool) -> tuple[list[bytes], bytes]:
    """The whole records at the start of ``data`` (each with its line end) and the rest. A
    JSON line has no raw newline inside; a CSV record may, inside quotes (RFC 4180: a quote
    inside a quoted field is doubled, so quotes before a record's end come in pairs)."""
    records: list[bytes] = []
    start = at = 0
    while (end := data.find(b"\n", at)) >= 0:
        quote = data.find(b'"', at, end) if csv_quoting else -1
        if quote >= 0:
            closing = data.find(b'"', quote + 1)
            if closing < 0:
                break  # the quoted field goes on past what arrived
            at = closing + 1
            continue
        records.append(data[start : end + 1])
        start = at = end + 1
    return records, data[start:]


def _csv_fields(record: bytes) -> list[str]:
    return next(csv.reader(io.StringIO(record.decode(), newline="")))


def _detail(response: httpx.Response) -> str:
    """The API's ``detail`` as one line: a string as it is, a validation error's list as
    ``where: what`` pairs; a body that is not docpipe's JSON, its first 300 characters."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list):
        parts = []
        for error in detail:
            if isinstance(error, dict):
                where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
                parts.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
            else:
                parts.append(str(error))
        detail = "; ".join(parts)
    text = str(detail) if detail is not None else (response.text[:300] or response.reason_phrase)
    return " ".join(text.split())


def _reason(exc: httpx.TransportError) -> str:
    """Why a connection failed, in a few words (httpx's message without the errno)."""
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    if "name or service not known" in text.lower() or "nodename nor servname" in text.lower():
        return "unknown host"
    return " ".join(text.split())[:200]


def _wait_s(response: httpx.Response, attempt: int) -> float:
    """The answer's Retry-After (seconds) with jitter on top, else exponential backoff."""
    try:
        retry_after: float | None = float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        retry_after = None
    if retry_after is not None:
        retry_after = min(max(retry_after, 0.0), MAX_WAIT_S)
    return retry_delay(attempt, base_s=_BACKOFF_BASE_S, cap_s=MAX_WAIT_S, retry_after_s=retry_after)
