"""The tenant's webhook signing secret: create or rotate it (shown once), read what it is."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from docpipe.errors import ConflictError, NotFoundError
from docpipe.state.webhook_secrets import describe_secrets, rotate_secret
from docpipe_api.deps import DatabaseDep, SettingsDep, TenantDep
from docpipe_api.errors import error_responses
from docpipe_api.links import follow
from docpipe_api.schemas import WebhookSecretCreatedOut, WebhookSecretOut, WebhookSecretsOut

__all__ = ["MAX_ROTATION_WINDOW_S", "router"]

router = APIRouter(tags=["webhooks"])

MAX_ROTATION_WINDOW_S = 30 * 86_400.0


@router.post(
    "/webhook-secret",
    status_code=201,
    response_model=WebhookSecretCreatedOut,
    summary="Create the tenant's webhook signing secret, or rotate it; the secret is shown once",
    responses={
        201: follow("", "", "read_webhook_secret"),
        **error_responses(409, 422, 503),
    },
)
def create_or_rotate_webhook_secret(
    db: DatabaseDep,
    settings: SettingsDep,
    tenant: TenantDep,
    response: Response,
    previous_valid_for_s: Annotated[
        float | None,
        Query(
            ge=0,
            le=MAX_ROTATION_WINDOW_S,
            allow_inf_nan=False,
            description="how long the secret being replaced keeps signing beside the new one "
            "(default: DOCPIPE_WEBHOOK_SECRET_ROTATION_WINDOW_S; 0: it stops now, e.g. leaked)",
        ),
    ] = None,
) -> WebhookSecretCreatedOut:
    if not settings.webhooks_enabled:
        raise ConflictError(
            "this deployment sends no webhooks (DOCPIPE_WEBHOOKS_ENABLED is off), so there "
            "is no signing secret to make"
        )
    window = settings.webhook_secret_rotation_window_s
    rotated = rotate_secret(
        db,
        settings.secrets_key.get_secret_value(),
        tenant,
        previous_valid_for_s=window if previous_valid_for_s is None else previous_valid_for_s,
    )
    # The only answer that carries the secret: no cache may keep it.
    response.headers["Cache-Control"] = "no-store"
    return WebhookSecretCreatedOut(
        current=WebhookSecretOut.model_validate(rotated.current),
        previous=WebhookSecretOut.model_validate(rotated.previous) if rotated.previous else None,
        secret=rotated.plaintext,
    )


@router.get(
    "/webhook-secret",
    response_model=WebhookSecretsOut,
    summary="The tenant's current signing secret and the previous one still signing (ids and "
    "dates, never the secrets)",
    responses=error_responses(404, 503),
)
def read_webhook_secret(db: DatabaseDep, tenant: TenantDep) -> WebhookSecretsOut:
    found = describe_secrets(db, tenant)
    if found.current is None:
        raise NotFoundError(
            f"tenant {tenant!r} has no webhook signing secret yet: POST /webhook-secret makes one"
        )
    return WebhookSecretsOut(
        current=WebhookSecretOut.model_validate(found.current),
        previous=WebhookSecretOut.model_validate(found.previous) if found.previous else None,
    )
