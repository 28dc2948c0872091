"""Tenants and their API keys: every run, batch and document belongs to the tenant whose key
created it, and another tenant's key never sees it.

A key reads ``dp_<id>_<secret>``: ``id`` (12 hex digits) names the row and is safe to show
and log; ``secret`` (256 random bits) is shown once, when the key is created. Only the
SHA-256 of the whole key is stored; with that much entropy a slow password hash would add
nothing but latency to every request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

from docpipe.errors import InvalidRequestError
from docpipe.state.db import Database

__all__ = [
    "DEFAULT_TENANT",
    "KEY_PATTERN",
    "TENANT_ID",
    "ApiKey",
    "CreatedKey",
    "InvalidApiKey",
    "RevokedApiKey",
    "VerifiedKeys",
    "api_key_is_active",
    "create_api_key",
    "list_api_keys",
    "revoke_api_key",
    "verify_api_key",
]

# Everyone's tenant under DOCPIPE_AUTH=none, and the local stack's.
DEFAULT_TENANT = "default"
TENANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
KEY_PATTERN = re.compile(r"^dp_(?P<id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})\Z")


class InvalidApiKey(Exception):
    """The key is malformed or unknown (the message never contains the key)."""


class RevokedApiKey(InvalidApiKey):
    """The key was valid once and has been revoked."""


@dataclass(frozen=True)
class ApiKey:
    id: str
    tenant_id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    plaintext: str  # the only time the secret exists outside its holder

    def __repr__(self) -> str:  # keep the secret out of tracebacks and debug logs
        return f"CreatedKey(key={self.key!r}, plaintext='dp_{self.key.id}_***')"


def _sha256(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def create_api_key(db: Database, tenant_id: str, name: str = "") -> CreatedKey:
    """A new key for ``tenant_id``; the plaintext is returned here and never again."""
    if not TENANT_ID.match(tenant_id):
        raise InvalidRequestError(
            f"tenant id {tenant_id[:80]!r} must be 1-64 characters of letters, digits and '._-', "
            "starting with a letter or digit"
        )
    if len(name) > 200:
        raise InvalidRequestError("a key's name is at most 200 characters")
    for _ in range(3):  # 48-bit random ids: a clash is a curiosity, not an error
        plaintext = f"dp_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"
        match = KEY_PATTERN.match(plaintext)
        assert match is not None
        key = db.one_as(
            ApiKey,
            "create_api_key",
            id=match["id"],
            tenant_id=tenant_id,
            name=name,
            key_sha256=_sha256(plaintext),
        )
        if key is not None:
            return CreatedKey(key, plaintext)
    raise RuntimeError("could not find a free API key id")


def verify_api_key(db: Database, plaintext: str) -> tuple[str, str]:
    """(key id, tenant) of a valid key; InvalidApiKey (or RevokedApiKey) otherwise."""
    match = KEY_PATTERN.match(plaintext)
    if match is None:
        raise InvalidApiKey("the API key is malformed (expected dp_<id>_<secret>)")
    digest = _sha256(plaintext)
    row = db.one("use_api_key", id=match["id"], key_sha256=digest)
    if row is None or not hmac.compare_digest(row["key_sha256"], digest):
        raise InvalidApiKey("the API key is not valid")
    if row["revoked_at"] is not None:
        raise RevokedApiKey(f"the API key {row['id']} was revoked")
    return row["id"], row["tenant_id"]


class VerifiedKeys:
    """``verify_api_key`` whose valid answers one process remembers for ``ttl_s`` (0: none),
    so that a client polling many times a second costs PostgreSQL one lookup per ``ttl_s``;
    a key revoked meanwhile keeps working that long in a process that had just seen it
    valid. Invalid keys are never remembered. At most ``max_keys`` keys, the oldest first
    forgotten."""

    def __init__(self, ttl_s: float, max_keys: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self._max_keys = max_keys
        self._valid: OrderedDict[str, tuple[float, str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def remembered(self, plaintext: str) -> tuple[str, str] | None:
        """(key id, tenant) of a key seen valid less than ``ttl_s`` ago; no I/O."""
        if self.ttl_s <= 0:
            return None
        digest = _sha256(plaintext)
        with self._lock:
            found = self._valid.get(digest)
            if found is None or time.monotonic() - found[0] >= self.ttl_s:
                return None
        return found[1], found[2]

    def verify(self, db: Database, plaintext: str) -> tuple[str, str]:
        """As verify_api_key, remembering a valid answer."""
        key_id, tenant = verify_api_key(db, plaintext)
        if self.ttl_s > 0:
            with self._lock:
                self._valid[_sha256(plaintext)] = (time.monotonic(), key_id, tenant)
                while len(self._valid) > self._max_keys:
                    self._valid.popitem(last=False)
        return key_id, tenant


def api_key_is_active(db: Database, key_id: str) -> bool:
    """Whether the key ``key_id`` still exists and is not revoked."""
    return db.one("api_key_is_active", id=key_id) is not None


def revoke_api_key(db: Database, key_id: str) -> ApiKey | None:
    """Revoke the key at once; None if there is no such key or it was revoked already."""
    return db.one_as(ApiKey, "revoke_api_key", id=key_id)


def list_api_keys(db: Database, tenant_id: str | None = None) -> list[ApiKey]:
    """Every key, or one tenant's, oldest first (never their secrets)."""
    return db.all_as(ApiKey, "list_api_keys", tenant_id=tenant_id)
