"""A provider's batch interface as the provider-batch lane's collector and poller use it
(docpipe.worker.provider_batches): one small protocol, one adapter per interface a provider
may declare under ``batch.interface`` in DOCPIPE_PROVIDERS:

- ``openai``: OpenAI's ``/v1/files`` and ``/v1/batches``, JSON lines in and out
  (docpipe.providers.openai_batches);
- ``anthropic``: Anthropic's Message Batches, the requests inside the create request and
  the results as JSON lines (docpipe.providers.anthropic_batches).

Every adapter takes a call's request as docpipe records it (the chat-completions body a
real-time call would send: PackedCall.body) and gives each answer back as a
chat-completions body (BatchLine.answer), so that a woken step reads, validates and prices
it exactly as any other answer. Each request goes with its custom_id ``docpipe-call-<id>``
(its llm_call_log row: :func:`call_id_of` reads it back). Every failure of a request to the
provider is a docpipe error, mapped as a chat request's (docpipe.providers.client: 429 and
5xx transient, other 4xx permanent).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson

from docpipe.errors import TransientLLMError
from docpipe.providers.client import check_response
from docpipe.state.provider_batches import BatchLine, PackedCall

__all__ = [
    "ENDED_STATUSES",
    "BatchHTTP",
    "BatchInterface",
    "RemoteBatch",
    "call_id_of",
    "line_error_kind",
]

# A provider batch's statuses in docpipe's words (OpenAI's): validating, in_progress,
# finalizing, cancelling while it runs; then one of these, after which nothing more comes.
ENDED_STATUSES = frozenset({"completed", "failed", "expired", "cancelled"})

_CUSTOM_ID = re.compile(r"^docpipe-call-(\d{1,18})$")


def call_id_of(custom_id: Any) -> int | None:
    """The llm_call_log row a request's custom_id names (None: not a request docpipe sent)."""
    found = _CUSTOM_ID.match(str(custom_id))
    return None if found is None else int(found[1])


def line_error_kind(status: int) -> str:
    """A request's error kind, as a real-time answer of its HTTP status is classified."""
    if status == 429:
        return "rate_limited"
    if status >= 500 or status in (408, 409):
        return "server_error"
    return {401: "auth", 403: "auth", 404: "not_found", 413: "too_large"}.get(status, "bad_request")


@dataclass(frozen=True)
class RemoteBatch:
    """A provider batch as its provider shows it, in docpipe's words."""

    remote_id: str
    status: str  # see ENDED_STATUSES
    created_at: float = 0.0  # the provider's clock, seconds since the epoch
    requests: int = 0
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    error: str | None = None  # why it failed or expired, as the provider says

    @property
    def ended(self) -> bool:
        return self.status in ENDED_STATUSES


class BatchInterface(Protocol):
    """What the collector and the poller ask of a provider's batch interface."""

    def request_bytes(self, call: PackedCall) -> bytes:
        """The call's request as the batch carries it (its size counts against the
        provider's ``max_bytes``)."""
        ...

    def stage(self, provider_batch_id: int, requests: Sequence[bytes]) -> str | None:
        """Put the requests where the provider reads them before the batch is created (an
        input file: its id, recorded before the create), or None when they travel in the
        create request itself."""
        ...

    def find_staged(self, provider_batch_id: int) -> str | None:
        """The input :meth:`stage` stored for this provider batch, if the provider has it."""
        ...

    def create(
        self, provider_batch_id: int, requests: Sequence[bytes], *, staged: str | None, window: str
    ) -> RemoteBatch:
        """A new provider batch of the requests (or of the staged input)."""
        ...

    def find(self, provider_batch_id: int, *, requests: int, since: float) -> list[RemoteBatch]:
        """The provider's batches that may be the one created for docpipe's provider batch
        ``provider_batch_id`` (of ``requests`` requests, its intent recorded at ``since``),
        the likeliest first: what recovery after a lost answer looks among."""
        ...

    def retrieve(self, remote_id: str) -> RemoteBatch: ...

    def cancel(self, remote_id: str) -> RemoteBatch: ...

    def results(self, remote: RemoteBatch) -> list[BatchLine]:
        """The answers and errors of an ended batch's requests (requests docpipe did not
        send, and lines that cannot be read, are left out)."""
        ...

    def close(self) -> None: ...


class BatchHTTP:
    """Requests to one provider, each ending within ``timeout_s``, their failures mapped to
    docpipe's errors."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout_s: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=dict(headers),
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The decoded JSON answer of a request."""
        response = self.send(method, path, **kwargs)
        try:
            return orjson.loads(response.content)
        except ValueError as exc:
            raise TransientLLMError(
                f"provider sent an unreadable answer to {method} {path}: {exc!r}",
                kind="bad_response",
                http_status=response.status_code,
            ) from exc

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise TransientLLMError(f"provider timed out: {exc!r}", kind="timeout") from exc
        except httpx.TransportError as exc:
            raise TransientLLMError(f"provider unreachable: {exc!r}", kind="connection") from exc
        check_response(response)
        return response
