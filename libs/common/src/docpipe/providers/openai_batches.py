"""OpenAI's batch interface (``batch.interface: openai``), as OpenAI's API reference
describes it and several other providers serve it at the same paths: ``/v1/files`` (the
input file of JSON lines, the output and error files) and ``/v1/batches`` (create,
retrieve, list, cancel).

Each provider batch docpipe creates is found again by what docpipe names it: its input
file's name and the batch's metadata hold docpipe's own id (:func:`file_name`,
:data:`METADATA_KEY`), so that a crash between a request and its record never makes a
second batch for the same calls.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

from docpipe import json_codec
from docpipe.providers.batch_interfaces import BatchHTTP, RemoteBatch, call_id_of, line_error_kind
from docpipe.providers.calls import call_request_id
from docpipe.state.provider_batches import BatchLine, PackedCall

__all__ = ["ENDPOINT", "METADATA_KEY", "OpenAIBatches", "file_name", "read_lines"]

ENDPOINT = "/v1/chat/completions"
METADATA_KEY = "docpipe_provider_batch"
_PAGE = 100


def file_name(provider_batch_id: int) -> str:
    """The input file's name of docpipe's provider batch ``provider_batch_id``."""
    return f"docpipe-provider-batch-{provider_batch_id}.jsonl"


class OpenAIBatches:
    """One provider's files and batches (docpipe.providers.batch_interfaces.BatchInterface)."""

    def __init__(self, http: BatchHTTP) -> None:
        self._http = http

    @staticmethod
    def headers(api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def close(self) -> None:
        self._http.close()

    def request_bytes(self, call: PackedCall) -> bytes:
        entry = {
            "custom_id": call_request_id(call.call_id),
            "method": "POST",
            "url": ENDPOINT,
            "body": call.body,
        }
        return json_codec.dumps(entry) + b"\n"

    def stage(self, provider_batch_id: int, requests: Sequence[bytes]) -> str | None:
        """The input file, stored with purpose ``batch`` under docpipe's name for it."""
        files = {"file": (file_name(provider_batch_id), b"".join(requests), "application/jsonl")}
        found = self._http.json("POST", "/files", data={"purpose": "batch"}, files=files)
        return str(found["id"])

    def find_staged(self, provider_batch_id: int) -> str | None:
        found = self._http.json("GET", "/files", params={"purpose": "batch"})
        for stored in found.get("data") or []:
            if stored.get("filename") == file_name(provider_batch_id):
                return str(stored["id"])
        return None

    def create(
        self, provider_batch_id: int, requests: Sequence[bytes], *, staged: str | None, window: str
    ) -> RemoteBatch:
        assert staged is not None, "an OpenAI batch reads its requests from its input file"
        body = {
            "input_file_id": staged,
            "endpoint": ENDPOINT,
            "completion_window": window,
            "metadata": {METADATA_KEY: str(provider_batch_id)},
        }
        return _remote(self._http.json("POST", "/batches", json=body))

    def find(self, provider_batch_id: int, *, requests: int, since: float) -> list[RemoteBatch]:
        """The batch whose metadata names docpipe's provider batch, if there is one."""
        for batch in self._batches():
            if (batch.get("metadata") or {}).get(METADATA_KEY) == str(provider_batch_id):
                return [_remote(batch)]
        return []

    def retrieve(self, remote_id: str) -> RemoteBatch:
        return _remote(self._http.json("GET", f"/batches/{remote_id}"))

    def cancel(self, remote_id: str) -> RemoteBatch:
        return _remote(self._http.json("POST", f"/batches/{remote_id}/cancel"))

    def results(self, remote: RemoteBatch) -> list[BatchLine]:
        """The lines of its output file (answers) and error file (everything else)."""
        lines: list[BatchLine] = []
        for file_id in (remote.output_file_id, remote.error_file_id):
            if file_id:
                lines += read_lines(self._http.send("GET", f"/files/{file_id}/content").content)
        return lines

    def _batches(self) -> Iterator[Any]:
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": _PAGE} | ({"after": after} if after else {})
            page = self._http.json("GET", "/batches", params=params)
            yield from page.get("data") or []
            if not page.get("has_more") or not page.get("data"):
                return
            after = page["data"][-1]["id"]


def _remote(batch: Mapping[str, Any]) -> RemoteBatch:
    status = str(batch.get("status"))
    return RemoteBatch(
        remote_id=str(batch["id"]),
        status=status,
        created_at=float(batch.get("created_at") or 0),
        input_file_id=_optional(batch.get("input_file_id")),
        output_file_id=_optional(batch.get("output_file_id")),
        error_file_id=_optional(batch.get("error_file_id")),
        error=_batch_errors(batch) if status in ("failed", "expired", "cancelled") else None,
    )


def _optional(value: Any) -> str | None:
    return str(value) if value else None


def _batch_errors(batch: Mapping[str, Any]) -> str:
    errors = (batch.get("errors") or {}).get("data") or []
    said = "; ".join(str(e.get("message")) for e in errors[:5] if isinstance(e, dict))
    return f"the provider batch ended {batch.get('status')}" + (f": {said}" if said else "")


def read_lines(data: bytes) -> Iterator[BatchLine]:
    """The lines of an output or error file, as answers and errors of docpipe's calls (lines
    of requests docpipe did not send, or that cannot be read, are left out)."""
    for raw in data.splitlines():
        try:
            entry = orjson.loads(raw)
            call_id = call_id_of(entry.get("custom_id"))
        except (ValueError, AttributeError):
            continue
        if call_id is None:
            continue
        response, error = entry.get("response"), entry.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            yield BatchLine(call_id, answer=response.get("body") or {})
        elif isinstance(response, dict):
            status = int(response.get("status_code") or 500)
            yield BatchLine(
                call_id, error_kind=line_error_kind(status), error=_message(response.get("body"))
            )
        elif isinstance(error, dict):
            yield BatchLine(
                call_id,
                error_kind=str(error.get("code") or "batch_error"),
                error=str(error.get("message") or error),
            )


def _message(body: Any) -> str:
    try:
        return str(body["error"]["message"])[:500]
    except (KeyError, TypeError):
        return str(body)[:500]
