"""What routes receive, as ``Annotated`` aliases so route signatures stay short: the
process' resources (docpipe_api.resources), the caller (docpipe_api.auth) and the
idempotency key. Bodies are read by docpipe_api.bodies."""

from __future__ import annotations

import re
from typing import Annotated

import redis
from fastapi import Depends, Header, Request

from docpipe.errors import InvalidRequestError
from docpipe.pipelines.catalog import Catalog
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe_api.auth import api_key_id, current_tenant
from docpipe_api.resources import Caller, Resources, resources_of

__all__ = [
    "CallerDep",
    "DatabaseDep",
    "IdempotencyKeyDep",
    "PipelinesDep",
    "RedisDep",
    "ResourcesDep",
    "SettingsDep",
    "TenantDep",
]

# Printable ASCII; no space at either end, which HTTP would strip on the way.
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,198}[\x21-\x7e])?")

# Dependencies that do no I/O are coroutines: FastAPI runs a plain function dependency in
# its thread pool, a hop that costs more than the function (docs/benchmarks/api-load.md).


async def _resources(request: Request) -> Resources:
    return resources_of(request)


async def _settings(request: Request) -> Settings:
    return resources_of(request).settings


async def _database(request: Request) -> Database:
    return resources_of(request).database


async def _redis(request: Request) -> redis.Redis:
    return resources_of(request).redis


async def _pipelines(request: Request) -> Catalog:
    return resources_of(request).pipelines


async def _caller(request: Request, tenant: Annotated[str, Depends(current_tenant)]) -> Caller:
    return Caller(tenant, api_key_id(request))


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


ResourcesDep = Annotated[Resources, Depends(_resources)]
SettingsDep = Annotated[Settings, Depends(_settings)]
DatabaseDep = Annotated[Database, Depends(_database)]
RedisDep = Annotated[redis.Redis, Depends(_redis)]
PipelinesDep = Annotated[Catalog, Depends(_pipelines)]
TenantDep = Annotated[str, Depends(current_tenant)]
CallerDep = Annotated[Caller, Depends(_caller)]
IdempotencyKeyDep = Annotated[str | None, Depends(_idempotency_key)]
