"""A run's or batch's ``callback_url``: accepted only where docpipe will deliver to it.

The cheap checks happen here, so a tenant hears of a mistake at once: webhooks must be
turned on and the tenant must have a signing secret (made with ``POST /webhook-secret``, so
its receiver can verify what it gets), or the request contradicts the deployment's or the
tenant's state (409); the URL must be http(s) without credentials and not name a forbidden
address literally, or the policy refuses it (403). The URL's form itself is the OpenAPI
document's (422 otherwise). The delivery checks the destination again after resolving it
(docpipe.worker.webhook_request): that is the guard.
"""

from __future__ import annotations

from fastapi import HTTPException
from pydantic import HttpUrl

from docpipe.destinations import DestinationPolicy, DestinationRefused
from docpipe.errors import ConflictError
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.webhook_secrets import has_current_secret

__all__ = ["accepted_callback_url"]


def accepted_callback_url(
    db: Database, settings: Settings, tenant: str, url: HttpUrl | None
) -> str | None:
    """The URL to store, or an error (409, 403) saying what to do instead."""
    if url is None:
        return None
    if not settings.webhooks_enabled:
        raise ConflictError(
            "callback_url: this deployment sends no webhooks (DOCPIPE_WEBHOOKS_ENABLED is "
            "off); follow the run with GET /runs/{id} or its event stream instead"
        )
    try:
        DestinationPolicy.from_allowlist(settings.webhook_allowed_destinations).check_submitted(
            str(url)
        )
    except DestinationRefused as exc:
        raise HTTPException(
            403, f"callback_url: {exc}; webhooks are sent to public addresses only"
        ) from None
    if not has_current_secret(db, tenant):
        raise ConflictError(
            f"callback_url: tenant {tenant!r} has no webhook signing secret yet; create one "
            "with POST /webhook-secret (it is shown once, keep it for your receiver to verify "
            "the webhooks), then submit again"
        )
    return str(url)
