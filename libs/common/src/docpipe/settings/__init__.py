"""Settings of every docpipe process, read from ``DOCPIPE_*`` environment variables.

One module per concern, each with its fields and the checks that keep them coherent
(the time-limit rule in :mod:`docpipe.settings.time_limits`, which the concerns whose
timeouts must fit inside a step build on); :class:`Settings` is all of them at once.
Build it with :func:`get_settings` (cached) rather than at import time, so tests and
workers can set the environment first and call ``get_settings.cache_clear()`` to re-read it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from docpipe.settings.api import ApiSettings
from docpipe.settings.batches import BatchSettings
from docpipe.settings.broker import BrokerSettings
from docpipe.settings.database import DatabaseSettings
from docpipe.settings.documents import DocumentSettings
from docpipe.settings.evaluations import EvaluationSettings
from docpipe.settings.leases import LeaseSettings
from docpipe.settings.limiter import LimiterSettings
from docpipe.settings.observability import ObservabilitySettings
from docpipe.settings.provider_batches import ProviderBatchSettings
from docpipe.settings.providers import ProviderSettings
from docpipe.settings.retention import RetentionSettings
from docpipe.settings.runs import RunSettings
from docpipe.settings.time_limits import TimeLimitSettings
from docpipe.settings.webhooks import WebhookSettings
from docpipe.settings.worker import WorkerSettings

__all__ = ["REMOVED_SETTINGS", "Settings", "get_settings"]

# Variables docpipe no longer reads, and what replaced them: a process refuses to start while
# one is set, rather than silently ignoring what its operator meant.
REMOVED_SETTINGS = {
    "DOCPIPE_WEBHOOK_SECRET": "webhooks are signed with each tenant's own secret now "
    "(POST /webhook-secret creates or rotates it), stored encrypted with DOCPIPE_SECRETS_KEY; "
    "remove DOCPIPE_WEBHOOK_SECRET",
}


class Settings(
    DatabaseSettings,
    BrokerSettings,
    ProviderSettings,
    LimiterSettings,
    RunSettings,
    DocumentSettings,
    BatchSettings,
    ProviderBatchSettings,
    EvaluationSettings,
    LeaseSettings,
    WorkerSettings,
    WebhookSettings,
    ApiSettings,
    RetentionSettings,
    ObservabilitySettings,
    TimeLimitSettings,
    BaseSettings,
):
    """Everything a docpipe process may be told; defaults run the local stack."""

    model_config = SettingsConfigDict(env_prefix="DOCPIPE_", extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_removed_settings(cls, data: Any) -> Any:
        for name, replacement in REMOVED_SETTINGS.items():
            if name in os.environ:
                raise ValueError(f"{name} is no longer read: {replacement}")
        return data


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
