"""A run's or batch's ``callback_url``: accepted only where docpipe will deliver to it.

The cheap checks happen here, so a tenant hears of a mistake at once with a 422: webhooks
must be turned on, the tenant must have a signing secret (made with ``POST
/webhook-secret``, so its receiver can verify what it gets), and the URL must be http(s)
without credentials and not name a forbidden address literally. The delivery checks the
destination again after resolving it (docpipe.worker.webhook_request): that is the guard.
"""

from __future__ import annotations

from pydantic import HttpUrl

from docpipe.destinations import DestinationPolicy, DestinationRefused
from docpipe.errors import InvalidRequestError
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.webhook_secrets import has_current_secret

__all__ = ["accepted_callback_url"]


def accepted_callback_url(
    db: Database, settings: Settings, tenant: str, url: HttpUrl | None
) -> str | None:
    """The URL to store, or InvalidRequestError (422) saying what to do instead."""
    if url is None:
        return None
    if not settings.webhooks_enabled:
        raise InvalidRequestError(
            "callback_url: this deployment sends no webhooks (DOCPIPE_WEBHOOKS_ENABLED is "
            "off); follow the run with GET /runs/{id} or its event stream instead"
        )
    try:
        DestinationPolicy.from_allowlist(settings.webhook_allowed_destinations).check_submitted(
            str(url)
        )
    except DestinationRefused as exc:
        raise InvalidRequestError(
            f"callback_url: {exc}; webhooks are sent to public addresses only"
        ) from None
    if not has_current_secret(db, tenant):
        raise InvalidRequestError(
            f"callback_url: tenant {tenant!r} has no webhook signing secret yet; create one "
            "with POST /webhook-secret (it is shown once, keep it for your receiver to verify "
            "the webhooks), then submit again"
        )
    return str(url)
