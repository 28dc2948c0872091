"""The API and the web pages: who may call, how often, and how long what they hold lasts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from docpipe.settings.time_limits import Seconds

__all__ = ["ApiSettings"]


class ApiSettings(BaseModel):
    """The API and the web pages"""

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
    # Requests that cost the API far more than a read (a file upload's checks, a batch's
    # parse, a review decision, a page render) run off the event loop, at most so many at
    # once per process; one more is answered 503 with Retry-After at once, never queued.
    max_heavy_requests: int = Field(
        default=4,
        ge=1,
        le=64,
        description=(
            "heavy requests one API process works on at once (checking an uploaded file, "
            "parsing a batch, deciding a review, rendering a page image), each in a thread of "
            "its own kind, never the probes' or the reads' (more: 503 with `Retry-After`)"
        ),
    )
    # The kubelet's probes from a process of their own, so that no tenant's request can
    # make one wait (docpipe_api.probe_server); 0: only the API's own /healthz and /readyz.
    probe_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description=(
            "a process beside the API's answers `/healthz` and `/readyz` at `:<port>` (0: off), "
            "from the API's event loop's heartbeat and its own PostgreSQL connection, whatever "
            "tenants' requests the API works on"
        ),
    )
    probe_host: str = Field(default="0.0.0.0", description="address that probes' server binds")  # noqa: S104  (the kubelet asks from outside the pod)
    max_decision_bytes: int = Field(
        default=1_000_000,
        ge=10_000,
        le=16_000_000,
        description=(
            "body of a review decision (`POST /runs/{id}/review`: a step's output as edited), "
            "counted as it arrives (more: 413)"
        ),
    )
    # Behind a proxy that ends TLS, uvicorn sees the original scheme only from a proxy it
    # trusts (--forwarded-allow-ips; the chart's api.forwardedAllowIps): "always" makes the
    # pages' cookie Secure whatever a request says, for a deployment served over HTTPS only.
    ui_secure_cookies: Literal["auto", "always"] = Field(
        default="auto",
        description=(
            "the web pages' session cookie is `Secure` when the request came over HTTPS (auto: "
            "as uvicorn sees it, from X-Forwarded-Proto of a proxy it trusts) or on every "
            "response (always: a deployment served over HTTPS only)"
        ),
    )
    hsts_max_age_s: int = Field(
        default=0,
        ge=0,
        le=63_072_000,
        description=(
            "`Strict-Transport-Security: max-age=N; includeSubDomains` on every answer to an "
            "HTTPS request (as with `DOCPIPE_UI_SECURE_COOKIES`: `always` counts every request "
            "as one); 0: not sent. Set it once the API is served over HTTPS only"
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
