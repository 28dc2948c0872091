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

    database_url: str = Field(
        default="postgresql://postgres@127.0.0.1:5432/docpipe",
        description="PostgreSQL (state, results)",
    )
    database_pool_size: int = Field(default=4, ge=1, le=100, description="connections per process")
    database_prepared_statements: bool = Field(
        default=True,
        description=(
            "named queries as server-side prepared statements (each parsed and planned once per "
            "connection); `false` behind a pooler that cannot keep them (PgBouncer in transaction "
            "mode before 1.21, or without `max_prepared_statements`)"
        ),
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0", description="the broker (transport only)"
    )

    # Providers as a list (see docpipe.provider_specs); when empty, one provider is made of
    # the one-provider settings below (llm_base_url ... provider_tpm).
    providers: list[ProviderSpec] = Field(
        default_factory=list,
        description=(
            "providers as a JSON list ([Providers](../guides/providers.md)); replaces the "
            "one-provider settings (`DOCPIPE_LLM_BASE_URL`, `DOCPIPE_MODEL_PRICES`, "
            "`DOCPIPE_LLM_OUTPUT_MODE`, `DOCPIPE_PROVIDER_RPM`/`_BURST`/`_TPM`/`_MAX_CONCURRENCY`);"
            " each key from `DOCPIPE_PROVIDER_<NAME>_API_KEY`"
        ),
    )
    # Every client gives up instead of hanging on a server that stops answering (a crashed
    # node, packets dropped without a reset); see the docs, Security > "Outages and timeouts".
    database_connect_timeout_s: int = Field(
        default=5, ge=2, le=600, description="connecting to PostgreSQL (whole seconds, at least 2)"
    )
    database_socket_timeout_s: Seconds = Field(
        default=10.0,
        description=(
            "a PostgreSQL connection whose sent data stays unacknowledged, or whose peer stops "
            "answering keepalives, this long is closed (libpq `tcp_user_timeout` and keepalives: a "
            "server that drops packets sends no reset)"
        ),
    )
    database_statement_timeout_s: Seconds = Field(
        default=15.0, description="PostgreSQL cancels a statement after this (`statement_timeout`)"
    )
    database_lock_timeout_s: Seconds = Field(
        default=5.0,
        description=(
            "a statement gives up waiting for a lock after this (`lock_timeout`; at most the "
            "statement timeout)"
        ),
    )
    database_pool_timeout_s: Seconds = Field(
        default=10.0, description="waiting for a free connection of the process' pool"
    )
    # Redis (the broker, the provider limiter, the API's rate limit): connecting, and any
    # one command's answer.
    redis_connect_timeout_s: Seconds = Field(
        default=2.0, description="connecting to Redis (docpipe's clients and Celery's)"
    )
    redis_socket_timeout_s: Seconds = Field(
        default=5.0,
        description=(
            "one Redis command's answer (docpipe's clients and Celery's); every client timeout must"
            " be below `DOCPIPE_TASK_SOFT_TIME_LIMIT_S`"
        ),
    )

    llm_base_url: str = Field(
        default="http://127.0.0.1:8100/v1",
        description="any OpenAI-compatible endpoint (the one-provider shorthand)",
    )
    llm_api_key: SecretStr = Field(
        default=SecretStr(""), description="its key (from a Secret; never logged)"
    )
    model_prices: dict[str, ModelPrice] = Field(
        default_factory=lambda: dict(DEFAULT_PRICES),
        description=(
            'JSON `{"model": {"input_per_mtok": .., "output_per_mtok": ..}}`, USD per million '
            "tokens; an unpriced model is an error"
        ),
    )
    llm_output_mode: OutputMode = Field(
        default=OutputMode.JSON_SCHEMA,
        description=(
            "how answers are constrained: `json_schema` (strict, the step's schema), `json_object`,"
            " `none`"
        ),
    )
    default_max_tokens: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description=(
            "a step's output budget (`max_tokens`, sent with every call) unless the step sets its "
            "own"
        ),
    )

    # The time-limit rule: every inner limit must fire before the one around it, or the outer
    # one kills the work without a recorded error (docs: reference/settings, "The time-limit rule").
    llm_timeout_s: Seconds = Field(default=20.0, description="one provider call")
    task_soft_time_limit_s: Seconds = Field(
        default=60.0,
        description="a step is interrupted and handed back (its finished calls stay memoised)",
    )
    task_time_limit_s: Seconds = Field(default=90.0, description="the worker child is killed")
    broker_visibility_timeout_s: Seconds = Field(
        default=3600.0, description="Redis re-delivers unacked messages after this"
    )

    # A dead worker's step is handed on at its next claim or within reaper_interval_s (its
    # lease session ended); a worker cut off loses its steps within lease_ttl_s +
    # reaper_interval_s (docs: concepts/leases).
    lease_ttl_s: Seconds = Field(default=8.0, description="a step's lease; renewed every heartbeat")
    heartbeat_interval_s: Seconds = Field(
        default=2.0, description="lease renewal period (at most half the TTL)"
    )
    reaper_interval_s: Seconds = Field(
        default=1.0,
        description=(
            "beat's recovery pass: hands on the steps of dead and cut-off workers, re-sends lost "
            "messages, ends runs past their deadline"
        ),
    )
    session_leases: bool = Field(
        default=True,
        description=(
            "tie each lease to the worker process' own PostgreSQL session, so a dead worker's "
            "step is handed on at once (false: the TTL alone; see "
            "[Leases](../concepts/leases.md))"
        ),
    )
    lease_database_url: str = Field(
        default="",
        description=(
            "where that session connects (empty: `DOCPIPE_DATABASE_URL`); behind PgBouncer in "
            "transaction mode, PostgreSQL itself or a session-mode pool (from a Secret, like "
            "the database URL)"
        ),
    )
    redrive_grace_s: Seconds = Field(
        default=5.0,
        description="a pending step whose message left the queue this long ago is re-sent",
    )
    outbox_sweep_interval_s: Seconds = Field(default=1.0, description="beat's outbox sweep")
    outbox_grace_s: Seconds = Field(
        default=2.0, description="rows older than this that are unpublished are swept"
    )
    max_step_attempts: int = Field(
        default=5, ge=1, le=50, description="then the run goes to `needs_review`"
    )
    retry_backoff_base_s: Seconds = Field(
        default=1.0, description="full-jitter window of attempt n: `min(cap, base * 2^(n-1))`"
    )
    retry_backoff_cap_s: Seconds = Field(
        default=60.0, description="the longest full-jitter window between a step's attempts"
    )
    park_delays_over_s: Seconds = Field(
        default=60.0, description="longer retry delays wait in PostgreSQL, not as Redis countdowns"
    )

    # Pipelines besides the built-in ones (docs: guides/pipelines): a folder of
    # pipeline files, and Python modules, comma-separated ("pkg.flows" for its PIPELINES,
    # "pkg.flows:INVOICE"), besides installed packages' docpipe.pipelines entry points.
    pipelines_dir: Path | None = Field(
        default=None,
        description=(
            "a folder of pipeline files (`*.yaml`), loaded at start-up "
            "([Pipelines](../guides/pipelines.md))"
        ),
    )
    pipeline_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Python pipelines, comma-separated: `pkg.flows` (its `PIPELINES`) or "
            "`pkg.flows:INVOICE`; installed packages' `docpipe.pipelines` entry points are loaded "
            "too"
        ),
    )

    # Uploads larger than their format's limit are refused with 413 naming it: text (and
    # each text of a batch), PDF and DOCX. A file is read and stored in bounded chunks (the
    # API holds a few MiB of it, whatever its size); PostgreSQL keeps its bytes.
    max_document_bytes: int = Field(
        default=1_000_000,
        ge=1,
        description="larger text uploads, and larger texts in a batch, get 413 naming it",
    )
    max_pdf_bytes: int = Field(
        default=50_000_000,
        ge=1,
        le=1_000_000_000,
        description=(
            "larger PDF uploads get 413 naming it (a scan is about 50-150 kB a page); read and "
            "stored in 1 MiB chunks, so the API's memory does not grow with it"
        ),
    )
    max_docx_bytes: int = Field(
        default=50_000_000,
        ge=1,
        le=1_000_000_000,
        description="larger DOCX uploads get 413 naming it; stored like a PDF",
    )
    max_document_pages: int = Field(
        default=500,
        ge=1,
        le=100_000,
        description="a PDF or DOCX with more pages fails `too_many_pages` before any page is read",
    )
    ocr_language: str = Field(
        default="eng",
        pattern=r"^[a-z][a-z_]{2,}(\+[a-z][a-z_]{2,})*$",
        description=(
            "Tesseract's language(s) for pages without a text layer (`eng+deu`); each needs its "
            "Debian `tesseract-ocr-<lang>` package in the worker image"
        ),
    )
    # One page's OCR; a page that takes longer is left without text, with a warning. Unset:
    # half the soft time limit, so that a page started in time ends before the step is
    # interrupted (when set: it must be below the soft time limit).
    ocr_page_timeout_s: Seconds | None = Field(
        default=None,
        description=(
            "one page's OCR; a page that takes longer is left without text, with a warning; must be"
            " below `DOCPIPE_TASK_SOFT_TIME_LIMIT_S`"
        ),
    )
    ocr_render_dpi: int = Field(
        default=300, ge=72, le=600, description="resolution pages are rendered at for OCR"
    )
    max_page_pixels: int = Field(
        default=25_000_000,
        ge=1_000_000,
        le=200_000_000,
        description=(
            "a page is never rendered into more pixels (a larger page is rendered at a lower dpi, "
            "with a warning)"
        ),
    )
    ocr_min_text_chars: int = Field(
        default=16,
        ge=1,
        description="a PDF page whose text layer has fewer non-blank characters is OCRed",
    )
    text_layer_min_score: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description=(
            "a PDF page whose text layer has a smaller share (0-1) of its characters in "
            "word-shaped tokens (no real words: a bad earlier OCR, a font without its Unicode "
            "map, a wrong encoding) is OCRed, and the OCR kept when it scores better"
        ),
    )
    ocr_low_confidence: float = Field(
        default=60.0,
        ge=0,
        le=100,
        description="a page OCRed with a lower mean word confidence (0-100) gets a warning",
    )
    page_image_max_pixels: int = Field(
        default=2_000_000,
        ge=100_000,
        le=25_000_000,
        description=(
            "`GET /documents/{id}/pages/{n}`: a PDF page's PNG has at most this many pixels "
            "(an A4 page at about 140 dpi by default); rendered once, kept in PostgreSQL"
        ),
    )
    poor_extraction_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description=(
            "a run of a pipeline with `review_if: [poor_extraction]` pauses for review after "
            "extract_text when more than this share (0-1) of its document's pages were read "
            "poorly (OCR confidence below `DOCPIPE_OCR_LOW_CONFIDENCE`, no text, OCR out of "
            "time), naming them"
        ),
    )
    # A DOCX is a zip: refused when its members expand past this many bytes or this many
    # times its own size (declared in its directory, or found while inflating).
    docx_max_expanded_bytes: int = Field(
        default=100_000_000,
        ge=1_000_000,
        description=(
            "a DOCX whose zip expands past this many bytes fails `decompression_bomb` (refused at "
            "upload when its directory declares it)"
        ),
    )
    docx_max_expansion_ratio: float = Field(
        default=100.0, ge=2, description="... or past this many times its own size"
    )
    # What a run may cost: a request that names no budget gets the default (0: none), one
    # that names more than the maximum is refused (422). Each run stops as budget_exceeded
    # once its calls cost more.
    default_run_budget_usd: Decimal = Field(
        default=Decimal("1.00"),
        ge=0,
        decimal_places=6,
        description=(
            "the budget of a run whose request names none (`budget_usd`, a batch's "
            "`run_budget_usd`); 0: none"
        ),
    )
    max_run_budget_usd: Decimal = Field(
        default=Decimal("100"),
        ge=1,
        decimal_places=6,
        description="the most a request may give one run (more: 422); at least 1",
    )
    # How far ahead a request may place its run: deadline_s, and start_at (from now); more
    # is refused (422) instead of keeping rows and parked messages around for years.
    max_deadline_s: float = Field(
        default=7 * 86_400.0,
        gt=0,
        le=30 * 86_400.0,
        description="the longest `deadline_s` a request may ask (more: 422; at most 30 days)",
    )
    max_start_delay_s: float = Field(
        default=7 * 86_400.0,
        gt=0,
        le=365 * 86_400.0,
        description="how far ahead `start_at` may be (more: 422)",
    )
    step_call_concurrency: int = Field(
        default=4,
        ge=1,
        le=64,
        description="independent calls of one step (one per section) in flight at once",
    )
    # The most calls one fan-out (a step's ask_all over a list: sections, a map step's
    # items) may send; a longer list fails the step into review before any is sent. Every
    # pipeline's lists are bounded in their schemas too; this bounds Python pipelines' code.
    max_fanout_calls: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description=(
            "the most calls one fan-out (`ask_all` over a list: sections, a map step's items) may "
            "send; a longer list sends none and the run goes to `needs_review`"
        ),
    )

    # The batch lane: how many batch runs may be in flight (admitted, not ended) at once;
    # the rest wait in PostgreSQL. Set it to the batch workers' total concurrency: more only
    # queues runs in Redis, where fair admission can no longer reorder them.
    batch_admission_window: int = Field(
        default=8,
        ge=1,
        description=(
            "batch runs in flight at once: set it to the batch workers' total concurrency (more "
            "only queues runs in Redis, where fairness cannot reorder them); the rest wait in "
            "PostgreSQL"
        ),
    )
    admission_interval_s: Seconds = Field(
        default=1.0,
        description=(
            "beat tops the window up this often and finishes batches (the API also admits when it "
            "stores new batch runs, workers when a batch run ends)"
        ),
    )
    batch_fairness_memory_s: Seconds = Field(
        default=600.0, description="admission favours the tenant served least over this period"
    )
    # A batch body is read as it arrives and refused (413) once it passes max_batch_bytes;
    # an API process holds at most max_batch_bodies_in_flight bodies at once (more: 503 with
    # Retry-After). A body costs at most ~3.5 times its size while it is read, parsed and
    # stored (bench/api_memory.py), so the API needs ~95 MiB + bytes x bodies x 3.5 (with
    # the defaults ~310 MiB) + ~6 MiB per file upload in flight, whatever the file's size:
    # under the chart's 512Mi (values.yaml, api.resources).
    max_batch_documents: int = Field(
        default=10_000, ge=1, description="documents per `POST /batches` (more: 422)"
    )
    max_batch_bytes: int = Field(
        default=32_000_000,
        ge=1,
        description=(
            "body of `POST /batches`, counted as it arrives (more: 413); each text in it is held to"
            " `DOCPIPE_MAX_DOCUMENT_BYTES` too"
        ),
    )
    max_batch_bodies_in_flight: int = Field(
        default=2,
        ge=1,
        le=64,
        description=(
            "batch bodies one API process holds at once (more: 503 with `Retry-After`); with "
            "`DOCPIPE_MAX_BATCH_BYTES` it bounds the API's memory "
            "([Security](../operations/security.md#bounds))"
        ),
    )

    # The provider limit shared by every worker (in Redis). 0 requests/min: no rate limit.
    provider_rpm: int = Field(
        default=0,
        ge=0,
        description="the provider's requests/minute, shared by all workers (0: no rate limit)",
    )
    provider_burst: int = Field(
        default=0, ge=0, description="token-bucket depth (0: one second's worth)"
    )
    provider_tpm: int = Field(
        default=0,
        ge=0,
        description=(
            "the provider's tokens/minute, shared by all workers (0: no limit; the provider's "
            "headers still count)"
        ),
    )
    provider_max_concurrency: int = Field(
        default=64, ge=1, description="provider calls in flight across all workers"
    )
    limiter_interactive_reserve: float = Field(
        default=0.25,
        ge=0,
        lt=1,
        description="share of concurrency and bucket that batch calls leave to interactive ones",
    )
    limiter_decrease_factor: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="a 429 multiplies the allowed rate by this (at most once a second)",
    )
    limiter_recovery_per_s: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="while calls succeed, this share of the configured rate comes back per second",
    )
    limiter_max_wait_s: Seconds = Field(
        default=20.0,
        description=(
            "a call waiting longer for the limiter hands its step back without using up an attempt "
            "(must be below the soft limit)"
        ),
    )
    limiter_breaker_failures: int = Field(
        default=3,
        ge=1,
        description=(
            "after this many calls in a row found the provider down (connection errors, timeouts, "
            "5xx), everyone waits for one probe"
        ),
    )
    limiter_breaker_probe_s: Seconds = Field(
        default=2.0,
        description=(
            "while the provider is down, one probe call goes out this often; its failure does not "
            "count against its step"
        ),
    )

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
    webhook_allowed_destinations: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description=(
            "private destinations webhooks may reach anyway: comma-separated CIDRs and host names "
            "(`.example` for every name under it); for local development and tests"
        ),
    )

    # The API: "keys" wants a tenant's API key (docpipe api-key create) on every request;
    # "none" serves every request as tenant "default" (local development only).
    auth: Literal["keys", "none"] = Field(
        default="keys",
        description=(
            "`keys`: every route but the probes wants a tenant's API key (`Authorization: Bearer`);"
            " `none`: every request is tenant `default` (local development)"
        ),
    )
    api_key_rpm: int = Field(
        default=600,
        ge=0,
        description="requests per minute per API key (more: 429 with Retry-After); 0: no limit",
    )
    api_key_cache_s: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description=(
            "an API process remembers a valid bearer key this long instead of asking PostgreSQL "
            "on every request (0: always asks); a revoked key keeps working at most this long "
            "against the API (the web pages check it every time)"
        ),
    )
    # Requests per minute allowed to one client address, counted before the API key is
    # checked (key guessing, floods without a key); 0: no limit. Behind a proxy every client
    # shares the proxy's address unless uvicorn trusts it (--forwarded-allow-ips).
    client_ip_rpm: int = Field(
        default=1200,
        ge=0,
        description=(
            "requests per minute per client address, counted before the key is checked (more: 429 "
            "with Retry-After); 0: no limit. Behind a proxy, see "
            "[Security](../operations/security.md#bounds)"
        ),
    )
    # Event streams (GET /runs/{id}/events): each ends after this long with an event telling
    # the client to reconnect, and one API key (or, without keys, one tenant) may hold this
    # many open at once across every API process (more: 429).
    event_stream_max_s: Seconds = Field(
        default=900.0, description="an event stream ends after this long with a `reconnect` event"
    )
    event_streams_per_key: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description=(
            "event streams one API key (without keys: one tenant) may hold open across every API "
            "process (more: 429)"
        ),
    )
    max_result_exports: int = Field(
        default=4,
        ge=1,
        le=64,
        description=(
            "results exports (`GET /batches/{id}/results`) one API process streams at once, each "
            "on a PostgreSQL connection of its own besides the pool (more: 503 with Retry-After)"
        ),
    )
    ui_session_max_age_s: float = Field(
        default=8 * 3600.0,
        ge=60,
        le=30 * 86_400,
        description=(
            "a sign-in to the web pages (`/ui`) lasts this long (60 s to 30 days); their session "
            "cookie is encrypted under a key derived from `DOCPIPE_SECRETS_KEY`, which the pages "
            "need under `DOCPIPE_AUTH=keys`"
        ),
    )

    # Retention: beat deletes what is older than this many days (0: keep forever), in
    # batches of retention_batch_size rows, each its own short transaction.
    retention_call_log_days: int = Field(
        default=30,
        ge=0,
        description=(
            "provider-call rows of ended runs older than this are deleted (0: kept forever)"
        ),
    )
    retention_outbox_days: int = Field(
        default=7,
        ge=0,
        description="outbox rows published longer ago are deleted (0: kept forever)",
    )
    retention_runs_days: int = Field(
        default=90,
        ge=0,
        description=(
            "runs that ended longer ago are deleted with their steps, calls, webhooks and ended "
            "batches (0: kept forever)"
        ),
    )
    retention_documents_days: int = Field(
        default=90,
        ge=0,
        description=(
            "documents stored longer ago that no run uses any more (their runs were pruned) are "
            "deleted (0: kept forever)"
        ),
    )
    retention_batch_size: int = Field(
        default=500, ge=1, le=10_000, description="rows deleted per transaction"
    )
    retention_interval_s: Seconds = Field(default=300.0, description="beat's retention pass")

    # Worker processes: recycled to bound leaks; a liveness file touched while alive.
    worker_max_tasks_per_child: int = Field(
        default=1000, ge=1, description="pool children are recycled"
    )
    worker_max_memory_per_child_mb: int = Field(
        default=512,
        ge=32,
        description="a pool child past this resident memory is recycled after its task",
    )
    worker_soft_shutdown_s: Seconds = Field(
        default=10.0, description="cold shutdown grace before running steps are requeued"
    )
    liveness_file: Path | None = Field(
        default=None,
        description="touched by the worker's/beat's main loop; probes compare its mtime",
    )
    # Celery's task events (task-sent, -received, -started, -succeeded) for Flower and
    # celery-exporter. Off by default: docpipe's own /metrics do not need them, and they cost
    # every step four more Redis messages, about 10 % of a worker's CPU at zero provider
    # latency and 1-2 points of the share of ideal at 0.2 s per call (bench/). Flower turns
    # them on at run time through Celery's remote control; only task-sent needs this setting.
    celery_task_events: bool = Field(
        default=False,
        description=(
            "send Celery's task events from the start (for Flower and celery-exporter; docpipe's "
            "`/metrics` need none, and Flower turns them on at run time through Celery's remote "
            "control, `celery -A docpipe.worker.app control enable_events`); each step costs four "
            "more Redis messages with them: about 10 % of a worker's CPU at zero provider latency, "
            "1-2 points of the share of ideal at 0.2 s per call"
        ),
    )

    # Workers and beat serve Prometheus metrics at http://<host>:<port>/metrics (0: off);
    # the API serves /metrics on its own port.
    metrics_port: int = Field(
        default=9808,
        ge=0,
        le=65535,
        description=(
            "the API, workers and beat serve Prometheus metrics at `:<port>/metrics` (0: off), "
            "never on the API's public port"
        ),
    )
    metrics_host: str = Field(default="0.0.0.0", description="address that metrics server binds")  # noqa: S104  (scraped from other pods)
    review_max_wait_s: Seconds = Field(
        default=86_400.0,
        description=(
            "the longest a run should wait for a person: beat exports it as "
            "`docpipe_review_max_wait_seconds` beside the review backlog, and the alert "
            "`DocpipeReviewWaitTooLong` fires once the oldest review waits longer"
        ),
    )

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
