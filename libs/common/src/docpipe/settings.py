"""Settings of every docpipe process, read from ``DOCPIPE_*`` environment variables.

Build them with :func:`get_settings` (cached) rather than at import time, so tests and
workers can set the environment first and call ``get_settings.cache_clear()`` to re-read it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import itertools
import os
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from docpipe.destinations import parse_allowlist_entry
from docpipe.provider_specs import (
    ModelPrice,
    ModelSpec,
    ProviderSpec,
    ProviderTable,
    resolve_providers,
)
from docpipe.structured_output import OutputMode

__all__ = ["REMOVED_SETTINGS", "ModelPrice", "Settings", "get_settings"]

Seconds = Annotated[float, Field(gt=0)]

# Variables docpipe no longer reads, and what replaced them: a process refuses to start while
# one is set, rather than silently ignoring what its operator meant.
REMOVED_SETTINGS = {
    "DOCPIPE_WEBHOOK_SECRET": "webhooks are signed with each tenant's own secret now "
    "(POST /webhook-secret creates or rotates it), stored encrypted with DOCPIPE_SECRETS_KEY; "
    "remove DOCPIPE_WEBHOOK_SECRET",
}
# A Fernet key is 32 random bytes; a key with this few distinct bytes was typed, not drawn.
_MIN_DISTINCT_KEY_BYTES = 16


DEFAULT_PRICES = {
    "gpt-4o-mini": ModelPrice(input_per_mtok=Decimal("0.15"), output_per_mtok=Decimal("0.60")),
    "gpt-4o": ModelPrice(input_per_mtok=Decimal("2.50"), output_per_mtok=Decimal("10.00")),
}


class Settings(BaseSettings):
    """Everything a docpipe process may be told; defaults run the local stack."""

    model_config = SettingsConfigDict(env_prefix="DOCPIPE_", extra="ignore", frozen=True)

    database_url: str = "postgresql://postgres@127.0.0.1:5432/docpipe"
    database_pool_size: int = Field(default=4, ge=1, le=100)
    # Hot queries as server-side prepared statements (each parsed and planned once per
    # connection); off behind a pooler that cannot keep them (PgBouncer in transaction mode
    # before 1.21, or without max_prepared_statements).
    database_prepared_statements: bool = True
    redis_url: str = "redis://127.0.0.1:6379/0"

    # Providers as a list (see docpipe.provider_specs); when empty, one provider is made of
    # the one-provider settings below (llm_base_url ... provider_tpm).
    providers: list[ProviderSpec] = Field(default_factory=list)
    # Every client gives up instead of hanging on a server that stops answering (a crashed
    # node, packets dropped without a reset); see README "Outages and timeouts".
    # PostgreSQL: connecting (libpq counts whole seconds, at least 2) ...
    database_connect_timeout_s: int = Field(default=5, ge=2, le=600)
    # ... data sent and not acknowledged, or a peer silent to keepalives, this long ...
    database_socket_timeout_s: Seconds = 10.0
    # ... one statement, and waiting for a lock inside it ...
    database_statement_timeout_s: Seconds = 15.0
    database_lock_timeout_s: Seconds = 5.0
    # ... and waiting for a free connection of the process' pool.
    database_pool_timeout_s: Seconds = 10.0
    # Redis (the broker, the provider limiter, the API's rate limit): connecting, and any
    # one command's answer.
    redis_connect_timeout_s: Seconds = 2.0
    redis_socket_timeout_s: Seconds = 5.0

    llm_base_url: str = "http://127.0.0.1:8100/v1"
    llm_api_key: SecretStr = SecretStr("")
    model_prices: dict[str, ModelPrice] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    llm_output_mode: OutputMode = OutputMode.JSON_SCHEMA
    # A step's output budget (max_tokens) unless the step sets its own; sent with every call.
    default_max_tokens: int = Field(default=1024, ge=1, le=1_000_000)

    # The time-limit rule: every inner limit must fire before the one around it, or the outer
    # one kills the work without a recorded error (see README, "Time limits").
    llm_timeout_s: Seconds = 20.0
    task_soft_time_limit_s: Seconds = 60.0
    task_time_limit_s: Seconds = 90.0
    broker_visibility_timeout_s: Seconds = 3600.0

    # A dead worker's step is handed on at its next claim or within reaper_interval_s (its
    # lease session ended); a worker cut off loses its steps within lease_ttl_s +
    # reaper_interval_s (README, "Leases").
    lease_ttl_s: Seconds = 8.0
    heartbeat_interval_s: Seconds = 2.0
    reaper_interval_s: Seconds = 1.0
    # Tie each lease to the worker process' own PostgreSQL session (off: the TTL alone) ...
    session_leases: bool = True
    # ... opened on this URL (empty: database_url); behind PgBouncer in transaction mode,
    # PostgreSQL itself or a session-mode pool.
    lease_database_url: str = ""
    # A pending step whose message left the queue this long ago without a claim is re-sent.
    redrive_grace_s: Seconds = 5.0
    outbox_sweep_interval_s: Seconds = 1.0
    # Rows the publisher right after commit should have sent by now (else: it crashed).
    outbox_grace_s: Seconds = 2.0
    max_step_attempts: int = Field(default=5, ge=1, le=50)
    retry_backoff_base_s: Seconds = 1.0
    retry_backoff_cap_s: Seconds = 60.0
    # Retries due later than this are parked in PostgreSQL instead of as a broker countdown.
    park_delays_over_s: Seconds = 60.0

    # Pipelines besides the built-in ones (README, "Write your own pipeline"): a folder of
    # pipeline files, and Python modules, comma-separated ("pkg.flows" for its PIPELINES,
    # "pkg.flows:INVOICE"), besides installed packages' docpipe.pipelines entry points.
    pipelines_dir: Path | None = None
    pipeline_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # Uploads (text, PDF or DOCX) larger than this are refused with 413; PDF and DOCX keep
    # their original bytes in PostgreSQL, so this bounds a document row too.
    max_document_bytes: int = Field(default=1_000_000, ge=1)
    # Text extraction (README, "Documents: formats, limits, OCR"). A PDF or DOCX with more
    # pages fails as too_many_pages before any page is read.
    max_document_pages: int = Field(default=500, ge=1, le=100_000)
    # Tesseract's language(s) for pages without a text layer ("eng", "eng+deu"): its
    # traineddata must be installed in the worker image (Debian: tesseract-ocr-<lang>).
    ocr_language: str = Field(default="eng", pattern=r"^[a-z][a-z_]{2,}(\+[a-z][a-z_]{2,})*$")
    # One page's OCR; a page that takes longer is left without text, with a warning. Unset:
    # half the soft time limit, so that a page started in time ends before the step is
    # interrupted (when set: it must be below the soft time limit).
    ocr_page_timeout_s: Seconds | None = None
    # Pages are rendered at this resolution for OCR ...
    ocr_render_dpi: int = Field(default=300, ge=72, le=600)
    # ... but never into more pixels than this (larger pages are rendered at a lower dpi).
    max_page_pixels: int = Field(default=25_000_000, ge=1_000_000, le=200_000_000)
    # A PDF page whose text layer has fewer non-blank characters than this is OCRed.
    ocr_min_text_chars: int = Field(default=16, ge=1)
    # A page read with a lower mean word confidence (0-100) gets a warning.
    ocr_low_confidence: float = Field(default=60.0, ge=0, le=100)
    # A DOCX is a zip: refused when its members expand past this many bytes or this many
    # times its own size (declared in its directory, or found while inflating).
    docx_max_expanded_bytes: int = Field(default=100_000_000, ge=1_000_000)
    docx_max_expansion_ratio: float = Field(default=100.0, ge=2)
    # What a run may cost: a request that names no budget gets the default (0: none), one
    # that names more than the maximum is refused (422). Each run stops as budget_exceeded
    # once its calls cost more.
    default_run_budget_usd: Decimal = Field(default=Decimal("1.00"), ge=0, decimal_places=6)
    max_run_budget_usd: Decimal = Field(default=Decimal("100"), ge=1, decimal_places=6)
    # How far ahead a request may place its run: deadline_s, and start_at (from now); more
    # is refused (422) instead of keeping rows and parked messages around for years.
    max_deadline_s: float = Field(default=7 * 86_400.0, gt=0, le=30 * 86_400.0)
    max_start_delay_s: float = Field(default=7 * 86_400.0, gt=0, le=365 * 86_400.0)
    # Independent calls of one step (a section each) in flight at once, per step.
    step_call_concurrency: int = Field(default=4, ge=1, le=64)
    # The most calls one fan-out (a step's ask_all over a list: sections, a map step's
    # items) may send; a longer list fails the step into review before any is sent. Every
    # pipeline's lists are bounded in their schemas too; this bounds Python pipelines' code.
    max_fanout_calls: int = Field(default=100, ge=1, le=10_000)

    # The batch lane: how many batch runs may be in flight (admitted, not ended) at once;
    # the rest wait in PostgreSQL. Set it to the batch workers' total concurrency: more only
    # queues runs in Redis, where fair admission can no longer reorder them.
    batch_admission_window: int = Field(default=8, ge=1)
    # Beat tops the window up this often; workers also admit as soon as a batch run ends.
    admission_interval_s: Seconds = 1.0
    # Fair admission remembers how much each tenant was served for this long.
    batch_fairness_memory_s: Seconds = 600.0
    # A batch body is read as it arrives and refused (413) once it passes max_batch_bytes;
    # an API process holds at most max_batch_bodies_in_flight bodies at once (more: 503 with
    # Retry-After). A body costs at most ~3.5 times its size while it is read, parsed and
    # stored (bench/api_memory.py), so the API needs ~95 MiB + bytes x bodies x 3.5: with
    # the defaults ~310 MiB, under the chart's 512Mi (values.yaml, api.resources).
    max_batch_documents: int = Field(default=10_000, ge=1)
    max_batch_bytes: int = Field(default=32_000_000, ge=1)
    max_batch_bodies_in_flight: int = Field(default=2, ge=1, le=64)

    # The provider limit shared by every worker (in Redis). 0 requests/min: no rate limit.
    provider_rpm: int = Field(default=0, ge=0)
    provider_burst: int = Field(default=0, ge=0)  # 0: one second's worth of provider_rpm
    provider_tpm: int = Field(default=0, ge=0)  # tokens per minute; 0: no limit
    provider_max_concurrency: int = Field(default=64, ge=1)
    # Share of the rate and concurrency that batch calls leave free for interactive ones.
    limiter_interactive_reserve: float = Field(default=0.25, ge=0, lt=1)
    # On a 429 the allowed rate is multiplied by this (at most once per second) ...
    limiter_decrease_factor: float = Field(default=0.5, gt=0, lt=1)
    # ... and, while calls succeed, this share of provider_rpm comes back per second.
    limiter_recovery_per_s: float = Field(default=0.05, gt=0, le=1)
    # A call waiting longer than this for the limiter hands its step back (transient), and
    # that attempt does not count: waiting is not failing.
    limiter_max_wait_s: Seconds = 20.0
    # After this many calls in a row found the provider down, everyone waits for a probe
    # sent every limiter_breaker_probe_s.
    limiter_breaker_failures: int = Field(default=3, ge=1)
    limiter_breaker_probe_s: Seconds = 2.0

    # Completion webhooks (README, "Security" > "Webhooks"). Off unless turned on, and then
    # only with DOCPIPE_SECRETS_KEY: each tenant signs with its own secret, stored encrypted.
    webhooks_enabled: bool = False
    # Fernet key (32 url-safe base64 bytes) encrypting the tenants' signing secrets at rest;
    # from the environment (a Kubernetes Secret) only.
    secrets_key: SecretStr = SecretStr("")
    # The whole of one delivery attempt: resolving, connecting, sending and reading.
    webhook_timeout_s: Seconds = 10.0
    webhook_max_attempts: int = Field(default=8, ge=1, le=50)
    webhook_retry_base_s: Seconds = 5.0
    # At most this much of a receiver's answer is read; the rest is never downloaded.
    webhook_max_response_bytes: int = Field(default=4096, ge=0, le=1_048_576)
    # After a rotation the previous secret signs too, for this long (receivers switch over).
    webhook_secret_rotation_window_s: float = Field(default=86_400.0, ge=0, le=30 * 86_400)
    # Deliveries in flight at once, across every worker: one tenant's, and everyone's. Keep
    # the total below the workers' total concurrency, so steps and recovery always find a
    # free process however slow the receivers are.
    webhook_tenant_concurrency: int = Field(default=2, ge=1, le=100)
    webhook_concurrency: int = Field(default=4, ge=1, le=1000)
    # Private destinations webhooks may reach anyway (local development, in-cluster
    # receivers): comma-separated CIDRs and host names (".example" allows names under it).
    webhook_allowed_destinations: Annotated[tuple[str, ...], NoDecode] = ()

    # The API: "keys" wants a tenant's API key (docpipe api-key create) on every request;
    # "none" serves every request as tenant "default" (local development only).
    auth: Literal["keys", "none"] = "keys"
    # Requests per minute allowed to one API key (a fixed window in Redis); 0: no limit.
    api_key_rpm: int = Field(default=600, ge=0)
    # An API process remembers a valid API key this long (0: looks it up on every request);
    # a revoked key keeps working at most this long in a process that had just seen it.
    api_key_cache_s: float = Field(default=2.0, ge=0, le=60)
    # Requests per minute allowed to one client address, counted before the API key is
    # checked (key guessing, floods without a key); 0: no limit. Behind a proxy every client
    # shares the proxy's address unless uvicorn trusts it (--forwarded-allow-ips).
    client_ip_rpm: int = Field(default=1200, ge=0)
    # Event streams (GET /runs/{id}/events): each ends after this long with an event telling
    # the client to reconnect, and one API key (or, without keys, one tenant) may hold this
    # many open at once across every API process (more: 429).
    event_stream_max_s: Seconds = 900.0
    event_streams_per_key: int = Field(default=10, ge=1, le=10_000)

    # Retention: beat deletes what is older than this many days (0: keep forever), in
    # batches of retention_batch_size rows, each its own short transaction.
    retention_call_log_days: int = Field(default=30, ge=0)  # calls of ended runs
    retention_outbox_days: int = Field(default=7, ge=0)  # published messages
    retention_runs_days: int = Field(default=90, ge=0)  # ended runs, their steps, batches
    # Documents stored longer ago that no run uses any more (runs go by the line above).
    retention_documents_days: int = Field(default=90, ge=0)
    retention_batch_size: int = Field(default=500, ge=1, le=10_000)
    retention_interval_s: Seconds = 300.0

    # Worker processes: recycled to bound leaks; a liveness file touched while alive.
    worker_max_tasks_per_child: int = Field(default=1000, ge=1)
    worker_max_memory_per_child_mb: int = Field(default=512, ge=32)
    # On SIGQUIT (cold shutdown) running steps get this long before they are requeued.
    worker_soft_shutdown_s: Seconds = 10.0
    liveness_file: Path | None = None
    # Celery's task events (task-sent, -received, -started, -succeeded) for Flower and
    # celery-exporter. Off by default: docpipe's own /metrics do not need them, and they cost
    # every step four more Redis messages, about 10 % of a worker's CPU at zero provider
    # latency and 1-2 points of the share of ideal at 0.2 s per call (bench/). Flower turns
    # them on at run time through Celery's remote control; only task-sent needs this setting.
    celery_task_events: bool = False

    # Workers and beat serve Prometheus metrics at http://<host>:<port>/metrics (0: off);
    # the API serves /metrics on its own port.
    metrics_port: int = Field(default=9808, ge=0, le=65535)
    metrics_host: str = "0.0.0.0"  # noqa: S104  (scraped from other pods)

    _provider_table: ProviderTable = PrivateAttr()

    @field_validator("pipeline_modules", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_removed_settings(cls, data: Any) -> Any:
        for name, replacement in REMOVED_SETTINGS.items():
            if name in os.environ:
                raise ValueError(f"{name} is no longer read: {replacement}")
        return data

    @field_validator("webhook_allowed_destinations", mode="before")
    @classmethod
    def _allowlist_entries(cls, value: Any) -> Any:
        entries = value.split(",") if isinstance(value, str) else value
        try:
            return tuple(str(parse_allowlist_entry(e)) for e in entries if str(e).strip())
        except ValueError as exc:
            raise ValueError(f"DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS: {exc}") from None

    @model_validator(mode="after")
    def _secrets_key_is_usable(self) -> Settings:
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
    def _limits_are_coherent(self) -> Settings:
        chain = [
            ("DOCPIPE_LLM_TIMEOUT_S", self.llm_timeout_s),
            ("DOCPIPE_TASK_SOFT_TIME_LIMIT_S", self.task_soft_time_limit_s),
            ("DOCPIPE_TASK_TIME_LIMIT_S", self.task_time_limit_s),
            ("DOCPIPE_BROKER_VISIBILITY_TIMEOUT_S", self.broker_visibility_timeout_s),
        ]
        for (inner, inner_s), (outer, outer_s) in itertools.pairwise(chain):
            if not inner_s < outer_s:
                raise ValueError(
                    f"incoherent time limits: {inner}={inner_s:g} must be below "
                    f"{outer}={outer_s:g} (rule: llm timeout < task soft limit < task hard "
                    f"limit < broker visibility timeout)"
                )
        if not self.task_soft_time_limit_s + self.llm_timeout_s < self.task_time_limit_s:
            raise ValueError(
                f"DOCPIPE_TASK_TIME_LIMIT_S={self.task_time_limit_s:g} must exceed "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S + DOCPIPE_LLM_TIMEOUT_S="
                f"{self.task_soft_time_limit_s + self.llm_timeout_s:g}: calls in flight at the "
                f"soft limit are answered and recorded before the hard limit kills the process"
            )
        if not self.heartbeat_interval_s * 2 <= self.lease_ttl_s:
            raise ValueError(
                f"DOCPIPE_HEARTBEAT_INTERVAL_S={self.heartbeat_interval_s:g} must be at most half "
                f"of DOCPIPE_LEASE_TTL_S={self.lease_ttl_s:g}, or one late heartbeat loses a "
                f"live worker's lease"
            )
        if self.limiter_max_wait_s >= self.task_soft_time_limit_s:
            raise ValueError(
                f"DOCPIPE_LIMITER_MAX_WAIT_S={self.limiter_max_wait_s:g} must be below "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S={self.task_soft_time_limit_s:g}"
            )
        self._client_timeouts_are_coherent()
        if self.ocr_page_timeout_s is not None and not (
            self.ocr_page_timeout_s < self.task_soft_time_limit_s
        ):
            raise ValueError(
                f"DOCPIPE_OCR_PAGE_TIMEOUT_S={self.ocr_page_timeout_s:g} must be below "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S={self.task_soft_time_limit_s:g}: a page's OCR "
                f"ends at its own limit, before the soft limit interrupts the step"
            )
        if self.webhook_timeout_s >= self.task_soft_time_limit_s:
            raise ValueError(
                f"DOCPIPE_WEBHOOK_TIMEOUT_S={self.webhook_timeout_s:g} must be below "
                f"DOCPIPE_TASK_SOFT_TIME_LIMIT_S={self.task_soft_time_limit_s:g}: a delivery "
                f"attempt ends at its own deadline, not by the soft limit's interruption"
            )
        if self.default_run_budget_usd > self.max_run_budget_usd:
            raise ValueError(
                f"DOCPIPE_DEFAULT_RUN_BUDGET_USD={self.default_run_budget_usd} must not exceed "
                f"DOCPIPE_MAX_RUN_BUDGET_USD={self.max_run_budget_usd}"
            )
        if self.retry_backoff_base_s > self.retry_backoff_cap_s:
            raise ValueError(
                "DOCPIPE_RETRY_BACKOFF_BASE_S must not exceed DOCPIPE_RETRY_BACKOFF_CAP_S"
            )
        self._provider_table = self._resolve_providers()
        return self

    def _resolve_providers(self) -> ProviderTable:
        if self.providers:
            return resolve_providers(self.providers, default_max_tokens=self.default_max_tokens)
        shorthand = ProviderSpec(
            name="default",
            base_url=self.llm_base_url,
            max_concurrency=self.provider_max_concurrency,
            rpm=self.provider_rpm,
            tpm=self.provider_tpm,
            burst=self.provider_burst,
            output_mode=self.llm_output_mode,
            models={
                name: ModelSpec(input_per_mtok=p.input_per_mtok, output_per_mtok=p.output_per_mtok)
                for name, p in self.model_prices.items()
            },
        )
        table = resolve_providers(
            [shorthand], default_max_tokens=self.default_max_tokens, explicit=False
        )
        provider = dataclasses.replace(table.providers[0], api_key=self.llm_api_key)
        return ProviderTable(
            (provider,),
            {name: dataclasses.replace(m, provider=provider) for name, m in table.models.items()},
        )

    @property
    def ocr_page_timeout(self) -> float:
        """One page's OCR time limit: the setting, or half the soft time limit."""
        if self.ocr_page_timeout_s is not None:
            return self.ocr_page_timeout_s
        return self.task_soft_time_limit_s / 2

    @property
    def provider_table(self) -> ProviderTable:
        """Every provider and model docpipe may call, checked at start-up."""
        return self._provider_table

    def _client_timeouts_are_coherent(self) -> None:
        """A client that waits on PostgreSQL or Redis gives up before Celery interrupts the
        step around it (a clear, recorded error instead of an interrupted client), and a
        lock wait fits inside its statement."""
        timeouts = {
            "DOCPIPE_DATABASE_CONNECT_TIMEOUT_S": self.database_connect_timeout_s,
            "DOCPIPE_DATABASE_SOCKET_TIMEOUT_S": self.database_socket_timeout_s,
            "DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S": self.database_statement_timeout_s,
            "DOCPIPE_DATABASE_POOL_TIMEOUT_S": self.database_pool_timeout_s,
            "DOCPIPE_REDIS_CONNECT_TIMEOUT_S": self.redis_connect_timeout_s,
            "DOCPIPE_REDIS_SOCKET_TIMEOUT_S": self.redis_socket_timeout_s,
        }
        for name, value in timeouts.items():
            if not value < self.task_soft_time_limit_s:
                raise ValueError(
                    f"{name}={value:g} must be below DOCPIPE_TASK_SOFT_TIME_LIMIT_S="
                    f"{self.task_soft_time_limit_s:g}: a client waiting on PostgreSQL or Redis "
                    f"gives up before the soft limit interrupts its step"
                )
        if self.database_lock_timeout_s > self.database_statement_timeout_s:
            raise ValueError(
                f"DOCPIPE_DATABASE_LOCK_TIMEOUT_S={self.database_lock_timeout_s:g} must not "
                f"exceed DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S="
                f"{self.database_statement_timeout_s:g}: a lock is waited for inside a statement"
            )

    def price_of(self, model: str) -> ModelPrice:
        """The price of ``model``; an unpriced model is a configuration error, never free."""
        return self._provider_table.model(model).price


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
