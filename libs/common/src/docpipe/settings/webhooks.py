"""Completion webhooks: whether they are sent, the key their secrets are kept under, where
they may go, and how hard a delivery tries."""

from __future__ import annotations

import base64
import binascii
import ipaddress
from typing import Annotated, Any, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from docpipe.settings.time_limits import Seconds, TimeLimitSettings

__all__ = ["AllowedDestination", "WebhookSettings", "parse_allowlist_entry"]

# A private network, or a host name (".internal" for every name under it), that webhooks
# may reach anyway (docpipe.destinations.DestinationPolicy).
AllowedDestination = ipaddress.IPv4Network | ipaddress.IPv6Network | str
# A Fernet key is 32 random bytes; a key with this few distinct bytes was typed, not drawn.
_MIN_DISTINCT_KEY_BYTES = 16


def parse_allowlist_entry(entry: str) -> AllowedDestination:
    """A CIDR (``10.1.0.0/16``, ``127.0.0.1``) or a host name (``hooks.internal``; a leading
    dot, ``.internal``, allows every name under it); ValueError otherwise."""
    text = entry.strip()
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        pass
    name = text.rstrip(".").lower()
    labels = name.removeprefix(".").split(".")
    if not name or not all(
        label and len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii()
        for label in labels
    ):
        raise ValueError(f"{entry!r} is neither a CIDR nor a host name")
    return name


class WebhookSettings(TimeLimitSettings):
    """Webhooks"""

    # Completion webhooks (docs: guides/webhooks). Off unless turned on, and then
    # only with DOCPIPE_SECRETS_KEY: each tenant signs with its own secret, stored encrypted.
    webhooks_enabled: bool = Field(
        default=False,
        description=(
            "send completion webhooks (needs `DOCPIPE_SECRETS_KEY`); off: a `callback_url` is "
            "refused with 409"
        ),
    )
    secrets_key: SecretStr = Field(
        default=SecretStr(""),
        description=(
            "Fernet key (32 bytes, url-safe base64) encrypting the tenants' webhook signing secrets"
            " at rest; from a Secret only; a missing or placeholder key stops the process when "
            "webhooks are on"
        ),
    )
    webhook_timeout_s: Seconds = Field(
        default=10.0,
        description=(
            "deadline of one whole delivery attempt (resolve, connect, send, read); below the soft "
            "time limit"
        ),
    )
    webhook_max_attempts: int = Field(
        default=8, ge=1, le=50, description="then the delivery is `failed`"
    )
    webhook_retry_base_s: Seconds = Field(
        default=5.0, description="backoff base between delivery attempts"
    )
    webhook_max_response_bytes: int = Field(
        default=4096,
        ge=0,
        le=1_048_576,
        description="bytes of a receiver's answer read at most (the rest is never downloaded)",
    )
    webhook_secret_rotation_window_s: float = Field(
        default=86_400.0,
        ge=0,
        le=30 * 86_400,
        description="after a rotation the previous secret keeps signing this long",
    )
    # Deliveries in flight at once, across every worker: one tenant's, and everyone's. Keep
    # the total below the workers' total concurrency, so steps and recovery always find a
    # free process however slow the receivers are.
    webhook_tenant_concurrency: int = Field(
        default=2,
        ge=1,
        le=100,
        description="one tenant's delivery attempts in flight across all workers",
    )
    webhook_concurrency: int = Field(
        default=4,
        ge=1,
        le=1000,
        description=(
            "delivery attempts in flight across all workers and tenants; keep it below the workers'"
            " total concurrency"
        ),
    )
    # Private destinations webhooks may reach anyway (local development, in-cluster
    # receivers): comma-separated CIDRs and host names (".example" allows names under it).
    webhook_allowed_destinations: Annotated[tuple[AllowedDestination, ...], NoDecode] = Field(
        default=(),
        description=(
            "private destinations webhooks may reach anyway: comma-separated CIDRs and host names "
            "(`.example` for every name under it); for local development and tests"
        ),
    )

    @field_validator("webhook_allowed_destinations", mode="before")
    @classmethod
    def _allowlist_entries(cls, value: Any) -> Any:
        entries = value.split(",") if isinstance(value, str) else value
        try:
            return tuple(
                e
                if isinstance(e, ipaddress.IPv4Network | ipaddress.IPv6Network)
                else parse_allowlist_entry(str(e))
                for e in entries
                if str(e).strip()
            )
        except ValueError as exc:
            raise ValueError(f"DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS: {exc}") from None

    @model_validator(mode="after")
    def _secrets_key_is_usable(self) -> Self:
        key = self.secrets_key.get_secret_value()
        if not key:
            if self.webhooks_enabled:
                raise ValueError(
                    "DOCPIPE_WEBHOOKS_ENABLED=true needs DOCPIPE_SECRETS_KEY (it encrypts the "
                    "tenants' webhook signing secrets): generate one with `python -c 'from "
                    "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'` "
                    "and pass it from a Secret"
                )
            return self
        try:
            raw = base64.urlsafe_b64decode(key.encode())
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise ValueError(
                "DOCPIPE_SECRETS_KEY must be a Fernet key: 32 bytes in url-safe base64 "
                "(44 characters)"
            )
        if len(set(raw)) < _MIN_DISTINCT_KEY_BYTES:
            raise ValueError(
                "DOCPIPE_SECRETS_KEY looks like a placeholder, not 32 random bytes: generate "
                "a key (Fernet.generate_key()) and keep it in a Secret"
            )
        return self

    @model_validator(mode="after")
    def _delivery_fits_in_a_step(self) -> Self:
        if self.webhook_timeout_s >= self.task_soft_time_limit_s:
            raise ValueError(
                f"DOCPIPE_WEBHOOK_TIMEOUT_S={self.webhook_timeout_s:g} must be below "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S={self.task_soft_time_limit_s:g}: a delivery "
                f"attempt ends at its own deadline, not by the soft limit's interruption"
            )
        return self
