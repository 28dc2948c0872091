"""What routes receive: the process' resources, the caller's tenant and the parsed bodies,
as ``Annotated`` aliases so route signatures stay short."""

from __future__ import annotations

import re
import tempfile
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import IO, Annotated

import anyio
import anyio.to_thread
import redis
from fastapi import Depends, Header, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from docpipe.broker.messages import Broker
from docpipe.errors import InvalidRequestError, UnreadableDocumentError
from docpipe.extraction import DocumentFormat, check_upload, format_of_head, sniff_format
from docpipe.extraction.zipguard import ZipBounds
from docpipe.pipelines.catalog import Catalog
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.tenants import DEFAULT_TENANT, InvalidApiKey, VerifiedKeys
from docpipe_api.bounds import enforce_rate_limit
from docpipe_api.errors import describe_validation_errors
from docpipe_api.schemas import DocumentText, ExtractRequest
from docpipe_api.streams import StreamSlots

__all__ = [
    "DEFAULT_TENANT",
    "ApiKeyIdDep",
    "BatchBodiesDep",
    "BrokerDep",
    "DatabaseDep",
    "DocumentUploadDep",
    "ExportSlotsDep",
    "ExtractRequestDep",
    "IdempotencyKeyDep",
    "PipelinesDep",
    "RedisDep",
    "Resources",
    "SettingsDep",
    "StreamSlotsDep",
    "TenantDep",
    "Upload",
    "client_address_limited",
    "current_tenant",
    "limit_client_address",
    "read_capped",
    "require_json",
    "resources_of",
    "tenant_of_key",
]

# Options are a few hundred bytes; anything near this is not an extraction request.
MAX_OPTIONS_BYTES = 64 * 1024
# Printable ASCII; no space at either end, which HTTP would strip on the way.
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,198}[\x21-\x7e])?")


@dataclass(frozen=True)
class Resources:
    """Opened by the app's lifespan, closed when it ends."""

    settings: Settings
    database: Database
    broker: Broker
    redis: redis.Redis
    pipelines: Catalog
    # Batch bodies this process may hold at once (DOCPIPE_MAX_BATCH_BODIES_IN_FLIGHT).
    batch_bodies: anyio.Semaphore
    stream_slots: StreamSlots
    # Results exports this process may stream at once (DOCPIPE_MAX_RESULT_EXPORTS).
    export_slots: threading.Semaphore
    # Valid API keys this process saw in the last DOCPIPE_API_KEY_CACHE_S.
    verified_keys: VerifiedKeys


def resources_of(request: Request) -> Resources:
    """The process' resources (also the web pages' app's: the API's lifespan shares them)."""
    resources = request.app.state.docpipe
    assert isinstance(resources, Resources), "the app's lifespan has not run"
    return resources


# Dependencies that do no I/O are coroutines: FastAPI runs a plain function dependency in
# its thread pool, a hop that costs more than the function (docs/benchmarks/api-load.md).


async def _resources(request: Request) -> Resources:
    return resources_of(request)


async def _settings(request: Request) -> Settings:
    return resources_of(request).settings


async def _database(request: Request) -> Database:
    return resources_of(request).database


async def _broker(request: Request) -> Broker:
    return resources_of(request).broker


async def _redis(request: Request) -> redis.Redis:
    return resources_of(request).redis


async def _pipelines(request: Request) -> Catalog:
    return resources_of(request).pipelines


async def _batch_bodies(request: Request) -> anyio.Semaphore:
    return resources_of(request).batch_bodies


async def _stream_slots(request: Request) -> StreamSlots:
    return resources_of(request).stream_slots


async def _export_slots(request: Request) -> threading.Semaphore:
    return resources_of(request).export_slots


async def _api_key_id(request: Request) -> str | None:
    """The id of the request's API key (set by current_tenant); None without API keys."""
    key_id = getattr(request.state, "api_key_id", None)
    return key_id if isinstance(key_id, str) else None


_bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="dp_<id>_<secret>",
    description="A tenant's API key, made with `docpipe api-key create TENANT`",
)


def _unauthorized(detail: str, *, invalid_token: bool) -> HTTPException:
    challenge = 'Bearer error="invalid_token"' if invalid_token else "Bearer"
    return HTTPException(401, detail, headers={"WWW-Authenticate": challenge})


async def current_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    resources: Annotated[Resources, Depends(_resources)],
) -> str:
    """The caller's tenant: the owner of the request's API key (DOCPIPE_AUTH=keys), or
    "default" for everyone (DOCPIPE_AUTH=none). 401 for a missing, malformed, unknown or
    revoked key; 429 once the key sent more than DOCPIPE_API_KEY_RPM requests this minute.
    Runs before anything else of a route (it is the routers' first dependency)."""
    settings = resources.settings
    if settings.auth == "none":
        return DEFAULT_TENANT
    if credentials is None:
        raise _unauthorized(
            "this route needs a tenant's API key: send 'Authorization: Bearer <key>'",
            invalid_token=False,
        )
    plaintext = credentials.credentials
    check = partial(tenant_of_key, resources, plaintext, remembered=True)
    try:
        if settings.api_key_rpm or resources.verified_keys.remembered(plaintext) is None:
            key_id, tenant = await anyio.to_thread.run_sync(check)
        else:  # remembered, and no rate to count: no I/O, so no thread
            key_id, tenant = check()
    except InvalidApiKey as exc:  # its message never contains the key
        raise _unauthorized(str(exc), invalid_token=True) from None
    request.state.api_key_id = key_id
    return tenant


def tenant_of_key(
    resources: Resources, plaintext: str, *, remembered: bool = False
) -> tuple[str, str]:
    """(key id, tenant) of a valid API key, counted against DOCPIPE_API_KEY_RPM (429 past
    it); InvalidApiKey (or RevokedApiKey) otherwise. What the API's bearer token and the
    web pages' session cookie are both checked with, on every request. With ``remembered``
    (the API's bearer tokens, which clients poll with) a key seen valid in the last
    DOCPIPE_API_KEY_CACHE_S is not looked up again; the web pages look every time."""
    keys = resources.verified_keys
    if not remembered or (found := keys.remembered(plaintext)) is None:
        found = keys.verify(resources.database, plaintext)
    key_id, tenant = found
    if resources.settings.api_key_rpm:
        enforce_rate_limit(resources.redis, f"key:{key_id}", resources.settings.api_key_rpm,
                           who="this API key")  # fmt: skip
    return key_id, tenant


def limit_client_address(request: Request, resources: Resources) -> None:
    """429 once the client's address sent more than DOCPIPE_CLIENT_IP_RPM requests this
    minute. Runs before the API key is looked at, so guessing keys and floods without one
    are cut off before they reach PostgreSQL. The address is the peer's, or the one a
    trusted proxy put in X-Forwarded-For (uvicorn's --forwarded-allow-ips: docs,
    operations/security.md, "Bounds")."""
    limit = resources.settings.client_ip_rpm
    if limit:
        address = request.client.host if request.client else "unknown"
        enforce_rate_limit(resources.redis, f"ip:{address}", limit, who="this address")


async def client_address_limited(
    request: Request, resources: Annotated[Resources, Depends(_resources)]
) -> None:
    """limit_client_address as the routers' first dependency: in a thread only when there
    is a limit to count (in Redis)."""
    if resources.settings.client_ip_rpm:
        await anyio.to_thread.run_sync(limit_client_address, request, resources)


SettingsDep = Annotated[Settings, Depends(_settings)]
DatabaseDep = Annotated[Database, Depends(_database)]
BrokerDep = Annotated[Broker, Depends(_broker)]
RedisDep = Annotated[redis.Redis, Depends(_redis)]
PipelinesDep = Annotated[Catalog, Depends(_pipelines)]
BatchBodiesDep = Annotated[anyio.Semaphore, Depends(_batch_bodies)]
StreamSlotsDep = Annotated[StreamSlots, Depends(_stream_slots)]
ExportSlotsDep = Annotated[threading.Semaphore, Depends(_export_slots)]
ApiKeyIdDep = Annotated[str | None, Depends(_api_key_id)]
TenantDep = Annotated[str, Depends(current_tenant)]


async def _idempotency_key(
    key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="1-200 printable ASCII characters; the same key returns the same run",
            json_schema_extra={"pattern": f"^{_IDEMPOTENCY_KEY.pattern}$"},
        ),
    ] = None,
) -> str | None:
    if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidRequestError(
            "the Idempotency-Key header must be 1-200 printable ASCII characters "
            f"(got {len(key)} characters{'' if key.isascii() else ', not all ASCII'})"
        )
    return key


IdempotencyKeyDep = Annotated[str | None, Depends(_idempotency_key)]


def _media_type(request: Request) -> tuple[str | None, dict[str, str]]:
    """The Content-Type's ``type/subtype`` (lower case) and its parameters."""
    value = request.headers.get("content-type")
    if value is None:
        return None, {}
    media_type, *params = (part.strip() for part in value.split(";"))
    parsed = {}
    for param in params:
        name, _, param_value = param.partition("=")
        parsed[name.strip().lower()] = param_value.strip().strip('"').lower()
    return media_type.lower(), parsed


def require_json(request: Request) -> None:
    """415 unless the body is declared as JSON."""
    media_type, _ = _media_type(request)
    if media_type != "application/json":
        raise HTTPException(
            415, f"send the body as application/json, not {media_type or 'untyped bytes'}"
        )


async def read_capped(request: Request, limit: int) -> bytearray:
    """The body, refused with 413 as soon as it is known to exceed ``limit`` bytes: from
    Content-Length before reading, else while reading (never more than limit + one chunk).
    A bytearray, not bytes: copying a body at the limit would double what it holds."""
    too_large = HTTPException(413, f"the body is larger than the limit of {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return body


@dataclass(frozen=True)
class Upload:
    """A document as uploaded: text, or a file (PDF, DOCX) with the format its bytes show,
    spooled to disk past its first MiB (``file``, open while the request is handled)."""

    format: DocumentFormat
    text: str = ""
    file: IO[bytes] | None = None


# PDF readers take the header within the first KiB: what is read before the limit is known.
_HEAD_BYTES = 1024
# What an upload keeps in memory: a file's first MiB (past it, the spooled file is on disk)
# and one MiB on its way there.
_SPOOL_BYTES = 1 << 20
_WRITE_BYTES = 1 << 20


@dataclass(frozen=True)
class _SizeLimit:
    bytes: int
    what: str  # "a PDF", ...
    setting: str

    def refusal(self) -> HTTPException:
        return HTTPException(413, f"the body is larger than the limit of {self.bytes} bytes "
                                  f"for {self.what} ({self.setting})")  # fmt: skip


def _size_limit(fmt: DocumentFormat | None, settings: Settings) -> _SizeLimit:
    if fmt is DocumentFormat.PDF:
        return _SizeLimit(settings.max_pdf_bytes, "a PDF", "DOCPIPE_MAX_PDF_BYTES")
    if fmt is DocumentFormat.DOCX:
        return _SizeLimit(settings.max_docx_bytes, "a DOCX", "DOCPIPE_MAX_DOCX_BYTES")
    return _SizeLimit(settings.max_document_bytes, "a text", "DOCPIPE_MAX_DOCUMENT_BYTES")


async def _document_upload(request: Request, settings: SettingsDep) -> AsyncIterator[Upload]:
    """The body as a document. Its format comes from its bytes: a PDF or DOCX whatever the
    Content-Type says; text only as declared (text/plain in UTF-8, or JSON {"text"}), as
    before; anything else 415. 413 past the format's limit, known from the first KiB: from
    Content-Length before reading on, else as soon as the body passes it. A file is spooled
    to disk as it arrives, so the API holds about 2 MiB of it whatever its size."""
    chunks = request.stream().__aiter__()
    head = bytearray()
    async for chunk in chunks:
        head += chunk
        if len(head) >= _HEAD_BYTES:
            break
    candidate = format_of_head(bytes(head[:_HEAD_BYTES]))
    limit = _size_limit(candidate, settings)
    declared = request.headers.get("content-length", "")
    if (declared.isdigit() and int(declared) > limit.bytes) or len(head) > limit.bytes:
        raise limit.refusal()
    if candidate is None:
        body = head
        async for chunk in chunks:
            body += chunk
            if len(body) > limit.bytes:
                raise limit.refusal()
        yield _text_upload(request, bytes(body))
        return
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as file:
        await _spool(head, chunks, file, limit)
        fmt = sniff_format(file)
        if fmt is None:  # a zip, but no Word file
            raise _unsupported(request)
        try:
            check_upload(file, fmt, _zip_bounds(settings))
        except UnreadableDocumentError as exc:
            raise InvalidRequestError(f"the {fmt.upper()} cannot be read: {exc}") from None
        yield Upload(fmt, file=file)


async def _spool(
    head: bytearray, chunks: AsyncIterator[bytes], file: IO[bytes], limit: _SizeLimit
) -> None:
    """The body into ``file``, the first bytes already read in ``head``, a MiB at a time
    (disk writes off the event loop); 413 once it passes ``limit``."""
    pending, size = head, len(head)
    async for chunk in chunks:
        size += len(chunk)
        if size > limit.bytes:
            raise limit.refusal()
        pending += chunk
        if len(pending) >= _WRITE_BYTES:
            await anyio.to_thread.run_sync(file.write, bytes(pending))
            pending = bytearray()
    await anyio.to_thread.run_sync(file.write, bytes(pending))
    file.seek(0)


def _unsupported(request: Request) -> HTTPException:
    media_type, _ = _media_type(request)
    return HTTPException(
        415,
        "send a PDF or DOCX file, or the document as text/plain (UTF-8) or as "
        f'application/json {{"text": "..."}}; these bytes are none of them (Content-Type '
        f"{media_type or 'missing'})",
    )


def _text_upload(request: Request, body: bytes) -> Upload:
    media_type, params = _media_type(request)
    if media_type not in ("text/plain", "application/json"):
        raise _unsupported(request)
    charset = params.get("charset", "utf-8")
    if media_type == "text/plain" and charset not in ("utf-8", "utf8", "us-ascii"):
        raise HTTPException(415, f"documents must be UTF-8 text, not charset={charset}")
    if media_type == "text/plain":
        try:
            return Upload(DocumentFormat.TEXT, text=body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidRequestError(
                f"the document is not valid UTF-8 (byte {exc.start}: {exc.reason})"
            ) from None
    try:
        return Upload(DocumentFormat.TEXT, text=DocumentText.model_validate_json(body).text)
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_errors(exc.errors(), prefix="body")) from None


def _zip_bounds(settings: Settings) -> ZipBounds:
    return ZipBounds(settings.docx_max_expanded_bytes, settings.docx_max_expansion_ratio)


async def _extract_request(request: Request) -> ExtractRequest:
    body = await read_capped(request, MAX_OPTIONS_BYTES)
    if not body.strip():
        return ExtractRequest()
    media_type, _ = _media_type(request)
    if media_type != "application/json":
        raise HTTPException(
            415, f"send the options as application/json, not {media_type or 'untyped bytes'}"
        )
    try:
        return ExtractRequest.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_errors(exc.errors(), prefix="body")) from None


DocumentUploadDep = Annotated[Upload, Depends(_document_upload)]
ExtractRequestDep = Annotated[ExtractRequest, Depends(_extract_request)]
