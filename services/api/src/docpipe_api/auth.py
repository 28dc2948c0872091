"""Who a request is from: the tenant of its API key (a bearer token, or the key a person
signed in to the pages with), checked on every request, and the per-minute limits of its
client address and of its key."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import anyio.to_thread
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docpipe.state.tenants import DEFAULT_TENANT, InvalidApiKey
from docpipe_api.bounds import enforce_rate_limit
from docpipe_api.resources import Resources, resources_of

__all__ = [
    "api_key_id",
    "client_address_limited",
    "current_tenant",
    "limit_client_address",
    "tenant_of_key",
]


def api_key_id(request: Request) -> str | None:
    """The id of the request's API key (set by current_tenant or the pages' session); None
    without API keys."""
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
) -> str:
    """The caller's tenant: the owner of the request's API key (DOCPIPE_AUTH=keys), or
    "default" for everyone (DOCPIPE_AUTH=none). 401 for a missing, malformed, unknown or
    revoked key; 429 once the key sent more than DOCPIPE_API_KEY_RPM requests this minute.
    Runs before anything else of a route (it is the routers' first dependency)."""
    resources = resources_of(request)
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
        enforce_rate_limit(
            resources.redis, f"key:{key_id}", resources.settings.api_key_rpm, who="this API key"
        )
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


async def client_address_limited(request: Request) -> None:
    """limit_client_address as the routers' first dependency: in a thread only when there
    is a limit to count (in Redis)."""
    resources = resources_of(request)
    if resources.settings.client_ip_rpm:
        await anyio.to_thread.run_sync(limit_client_address, request, resources)
