"""Tenants' webhook signing secrets: made by docpipe, shown once, stored encrypted, rotated.

One secret per tenant, not per endpoint. A callback URL is an option of each run or batch,
not a registered endpoint, so there is no endpoint to hang a secret on; what the secret must
guarantee is that a tenant verifies its own webhooks and no other tenant can forge them,
which a secret per tenant does. A tenant with several receivers gives each the same secret.

A secret reads ``whsec_<base64 of 32 random bytes>``, the Standard Webhooks form that its
libraries take as is. It is returned once, when made, and kept only as a Fernet token under
DOCPIPE_SECRETS_KEY, so a copy of the database alone signs nothing. A rotation makes a new
current secret; the previous one keeps signing beside it (Standard Webhooks sends several
signatures in one header) for a window, default DOCPIPE_WEBHOOK_SECRET_ROTATION_WINDOW_S,
so receivers switch over without dropping a webhook. A window of 0 revokes the previous
secret at once (it leaked). A secret retired earlier stops signing at the next rotation:
at most two secrets sign at any time.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from datetime import datetime

from cryptography.fernet import Fernet, InvalidToken

from docpipe.state.db import Database

__all__ = [
    "RotatedSecret",
    "SecretInfo",
    "TenantSecrets",
    "UnreadableSecret",
    "describe_secrets",
    "has_current_secret",
    "rotate_secret",
    "signing_secrets",
]

_SECRET_BYTES = 32


class UnreadableSecret(Exception):
    """A stored secret does not decrypt with DOCPIPE_SECRETS_KEY (the key was changed)."""


@dataclass(frozen=True)
class SecretInfo:
    """What may be shown about a secret: never the secret."""

    id: str
    created_at: datetime
    expires_at: datetime | None  # None: the current secret


@dataclass(frozen=True)
class _StoredSecret:
    id: str
    secret_encrypted: str
    created_at: datetime
    expires_at: datetime | None


@dataclass(frozen=True)
class RotatedSecret:
    current: SecretInfo
    previous: SecretInfo | None  # still signing until its expires_at
    plaintext: str  # the only time the secret exists outside its holder

    def __repr__(self) -> str:  # keep the secret out of tracebacks and debug logs
        return f"RotatedSecret(current={self.current!r}, previous={self.previous!r})"


@dataclass(frozen=True)
class TenantSecrets:
    current: SecretInfo | None
    previous: SecretInfo | None


def rotate_secret(
    db: Database, secrets_key: str, tenant_id: str, *, previous_valid_for_s: float
) -> RotatedSecret:
    """A new current secret for ``tenant_id`` (its first, or a rotation); the plaintext is
    returned here and never again. The previous current secret signs for
    ``previous_valid_for_s`` more seconds; any older one stops now."""
    plaintext = "whsec_" + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode()
    token = Fernet(secrets_key.encode()).encrypt(plaintext.encode()).decode()
    with db.transaction() as tx:
        tx.one("webhook_secret_lock", tenant_id=tenant_id)
        previous = tx.one_as(
            SecretInfo,
            "retire_webhook_secret",
            tenant_id=tenant_id,
            previous_valid_for_s=previous_valid_for_s,
        )
        current = tx.one_as(
            SecretInfo,
            "create_webhook_secret",
            id=f"whs_{secrets.token_hex(6)}",
            tenant_id=tenant_id,
            secret_encrypted=token,
        )
    assert current is not None
    return RotatedSecret(current=current, previous=previous, plaintext=plaintext)


def _stored(db: Database, tenant_id: str) -> list[_StoredSecret]:
    return db.all_as(_StoredSecret, "tenant_webhook_secrets", tenant_id=tenant_id)


def describe_secrets(db: Database, tenant_id: str) -> TenantSecrets:
    """The tenant's current secret and the previous one still signing, without the secrets."""
    infos = [SecretInfo(s.id, s.created_at, s.expires_at) for s in _stored(db, tenant_id)]
    return TenantSecrets(
        current=next((i for i in infos if i.expires_at is None), None),
        previous=next((i for i in infos if i.expires_at is not None), None),
    )


def has_current_secret(db: Database, tenant_id: str) -> bool:
    return describe_secrets(db, tenant_id).current is not None


def signing_secrets(db: Database, secrets_key: str, tenant_id: str) -> list[str]:
    """Every secret of the tenant that signs now, current first (empty: it has none)."""
    fernet = Fernet(secrets_key.encode())
    try:
        return [
            fernet.decrypt(s.secret_encrypted.encode()).decode() for s in _stored(db, tenant_id)
        ]
    except InvalidToken:
        raise UnreadableSecret(
            f"a webhook secret of tenant {tenant_id!r} does not decrypt with DOCPIPE_SECRETS_KEY"
        ) from None
