"""What routes receive: the process' resources, the caller's tenant and the parsed bodies,
as ``Annotated`` aliases so route signatures stay short."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Annotated

import anyio
import anyio.to_thread
import redis
from fastapi import Depends, Header, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from docpipe.broker.messages import Broker
from docpipe.errors import InvalidRequestError, UnreadableDocumentError
from docpipe.extraction import DocumentFormat, check_upload, sniff_format
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
    "ExtractRequestDep",
    "IdempotencyKeyDep",
    "PipelinesDep",
    "RedisDep",
    "Resources",
    "SettingsDep",
    "StreamSlotsDep",
    "TenantDep",
    "Upload",
    "current_tenant",
    "limit_client_address",
    "read_capped",
    "require_json",
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
    # Valid API keys this process saw in the last DOCPIPE_API_KEY_CACHE_S.
    verified_keys: VerifiedKeys


# Dependencies that do no I/O are coroutines: FastAPI runs a plain function dependency in
# its thread pool, a hop that costs more than the function (docs/benchmarks/api-load.md).


def _app_resources(request: Request) -> Resources:
    resources = request.app.state.docpipe
    assert isinstance(resources, Resources), "the app's lifespan has not run"
    return resources


async def _resources(request: Request) -> Resources:
    return _app_resources(request)


async def _settings(request: Request) -> Settings:
    return _app_resources(request).settings


async def _database(request: Request) -> Database:
    return _app_resources(request).database


async def _broker(request: Request) -> Broker:
    return _app_resources(request).broker


async def _redis(request: Request) -> redis.Redis:
    return _app_resources(request).redis


async def _pipelines(request: Request) -> Catalog:
    return _app_resources(request).pipelines


async def _batch_bodies(request: Request) -> anyio.Semaphore:
    return _app_resources(request).batch_bodies


async def _stream_slots(request: Request) -> StreamSlots:
    return _app_resources(request).stream_slots


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
    keys, plaintext = resources.verified_keys, credentials.credentials
    if (found := keys.remembered(plaintext)) is None:
        try:
            found = await anyio.to_thread.run_sync(keys.verify, resources.database, plaintext)
        except InvalidApiKey as exc:  # its message never contains the key
            raise _unauthorized(str(exc), invalid_token=True) from None
    key_id, tenant = found
    request.state.api_key_id = key_id
    if settings.api_key_rpm:
        await anyio.to_thread.run_sync(partial(
            enforce_rate_limit, resources.redis, f"key:{key_id}", settings.api_key_rpm,
            who="this API key",
        ))  # fmt: skip
    return tenant


async def limit_client_address(
    request: Request, resources: Annotated[Resources, Depends(_resources)]
) -> None:
    """429 once the client's address sent more than DOCPIPE_CLIENT_IP_RPM requests this
    minute. Runs before the API key is looked at, so guessing keys and floods without one
    are cut off before they reach PostgreSQL. The address is the peer's, or the one a
    trusted proxy put in X-Forwarded-For (uvicorn's --forwarded-allow-ips: README,
    "Security" > "Bounds")."""
    limit = resources.settings.client_ip_rpm
    if limit:
        address = request.client.host if request.client else "unknown"
        await anyio.to_thread.run_sync(partial(
            enforce_rate_limit, resources.redis, f"ip:{address}", limit, who="this address"
        ))  # fmt: skip


SettingsDep = Annotated[Settings, Depends(_settings)]
DatabaseDep = Annotated[Database, Depends(_database)]
BrokerDep = Annotated[Broker, Depends(_broker)]
RedisDep = Annotated[redis.Redis, Depends(_redis)]
PipelinesDep = Annotated[Catalog, Depends(_pipelines)]
BatchBodiesDep = Annotated[anyio.Semaphore, Depends(_batch_bodies)]
StreamSlotsDep = Annotated[StreamSlots, Depends(_stream_slots)]
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
    """A document as uploaded: text, or a file (PDF, DOCX) with the format its bytes show."""

    format: DocumentFormat
    text: str = ""
    data: bytes = b""


async def _document_upload(request: Request, settings: SettingsDep) -> Upload:
    """The body as a document. Its format comes from its bytes: a PDF or DOCX whatever the
    Content-Type says; text only as declared (text/plain in UTF-8, or JSON {"text"}), as
    before; anything else 415. 413 past DOCPIPE_MAX_DOCUMENT_BYTES."""
    media_type, params = _media_type(request)
    # One document is small (DOCPIPE_MAX_DOCUMENT_BYTES): a copy into bytes costs little.
    body = bytes(await read_capped(request, settings.max_document_bytes))
    if (fmt := sniff_format(body)) is not None:
        try:
            check_upload(body, fmt, _zip_bounds(settings))
        except UnreadableDocumentError as exc:
            raise InvalidRequestError(f"the {fmt.upper()} cannot be read: {exc}") from None
        return Upload(fmt, data=body)
    if media_type not in ("text/plain", "application/json"):
        raise HTTPException(
            415,
            "send a PDF or DOCX file, or the document as text/plain (UTF-8) or as "
            f'application/json {{"text": "..."}}; these bytes are none of them (Content-Type '
            f"{media_type or 'missing'})",
        )
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
