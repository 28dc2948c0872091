"""OpenTelemetry tracing: one trace per document run, from the API request through every step.

Configuration is the standard ``OTEL_*`` environment only. Tracing is on when an OTLP
endpoint is given (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``;
OTLP over HTTP/protobuf) and not switched off (``OTEL_SDK_DISABLED=true``,
``OTEL_TRACES_EXPORTER=none``); otherwise nothing is imported or patched. The service name
defaults to the process' role (``docpipe-api``, ``docpipe-worker``); ``OTEL_SERVICE_NAME``
and ``OTEL_RESOURCE_ATTRIBUTES`` override it, ``OTEL_TRACES_SAMPLER`` replaces the sampler.

Where tracing starts
--------------------
- API: ``create_app`` configures it and instruments the FastAPI app (the lifespan flushes).
- Worker: in each pool process after the fork (``worker_process_init``; the exporter's
  connection and the batch processor's thread must not be inherited), flushed on
  ``worker_process_shutdown``, which a child runs before it exits (recycled by
  ``max_tasks_per_child``, or at shutdown). The main process runs no task and no tracing.
- Beat is not traced: it only sends periodic ticks.
Celery (publish and run), httpx (provider calls, webhooks) and psycopg are instrumented.

One trace per run, across the outbox and the queue
---------------------------------------------------
The API stores its request span's ``traceparent`` with the run (``pipeline_run``), and every
outbox row of the run copies it. Celery's instrumentation opens a producer span when a
message is published, as a child of the *current* context, and puts it in the message
headers; the worker's task span is its child. :func:`publish_context` chooses that context
for each outbox message:

1. the current span, when it is the task span of the same run (``docpipe.run_id``): a step
   publishing the next one, so the trace reads API -> step 1 -> step 2 -> ...;
2. else the run's stored traceparent: the API request itself, and every path that publishes
   from an unrelated context (the outbox sweep, the reaper, batch admission, a retry parked
   in PostgreSQL) still lands in the run's trace, under the request that created it;
3. else a new root, never the unrelated current span (a periodic task's, another run's).

Batch runs store no traceparent (a 10,000-document batch as one trace helps nobody): each
starts its own trace when admitted, and its steps chain by rule 1.

Sampling: unless ``OTEL_TRACES_SAMPLER`` is set, children follow their parent, and of root
spans only those that start work are kept: API requests, publishes and task runs, but not
periodic maintenance tasks (several per second) nor the parentless queries of the
lease-renewal thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import TracerProvider

__all__ = [
    "RUN_ID_ATTRIBUTE",
    "annotate_step",
    "configure",
    "current_traceparent",
    "enabled",
    "instrument_fastapi",
    "publish_context",
    "record_inline_step",
    "shutdown",
]

log = logging.getLogger(__name__)

RUN_ID_ATTRIBUTE = "docpipe.run_id"
STEP_ATTRIBUTE = "docpipe.step"
# Health checks and scrapes are not requests anybody follows.
_UNTRACED_URLS = "/healthz,/readyz,/metrics"

_provider: TracerProvider | None = None
_configured_pid: int | None = None


def enabled() -> bool:
    """Whether the OTEL_* environment asks for traces to be exported."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure(service_name: str) -> bool:
    """Start tracing in this process (once; again in a forked child). False when off."""
    global _provider, _configured_pid
    if _configured_pid == os.getpid():
        return _provider is not None
    _configured_pid = os.getpid()
    if not enabled():
        _provider = None
        return False
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    _provider = _new_provider(service_name)
    trace.set_tracer_provider(_provider)
    celery = CeleryInstrumentor()  # type: ignore[no-untyped-call]
    for instrumentor in (celery, HTTPXClientInstrumentor(), PsycopgInstrumentor()):
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(tracer_provider=_provider)
    log.info("tracing on: %s", service_name)
    return True


def _new_provider(service_name: str) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import (
        Decision,
        ParentBased,
        Sampler,
        SamplingResult,
    )
    from opentelemetry.trace import Link, SpanKind
    from opentelemetry.util.types import Attributes

    class WorkRoots(Sampler):
        """Keeps root spans that start work; drops periodic ticks and parentless queries."""

        def should_sample(
            self,
            parent_context: otel_context.Context | None,
            trace_id: int,
            name: str,
            kind: SpanKind | None = None,
            attributes: Attributes = None,
            links: Sequence[Link] | None = None,
            trace_state: trace.TraceState | None = None,
        ) -> SamplingResult:
            if kind in (SpanKind.CLIENT, SpanKind.INTERNAL) or ".periodic." in name:
                return SamplingResult(Decision.DROP)
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

        def get_description(self) -> str:
            return "DocpipeWorkRoots"

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    sampler = None if os.environ.get("OTEL_TRACES_SAMPLER") else ParentBased(root=WorkRoots())
    provider = TracerProvider(resource=resource, sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def instrument_fastapi(app: FastAPI) -> None:
    if _provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, tracer_provider=_provider, excluded_urls=_UNTRACED_URLS)


def shutdown(timeout_s: float = 5.0) -> None:
    """Export what is buffered and stop (a process about to exit)."""
    global _provider
    if _provider is None or _configured_pid != os.getpid():
        return
    provider, _provider = _provider, None
    try:
        provider.force_flush(timeout_millis=int(timeout_s * 1000))
    finally:
        provider.shutdown()


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, to store with work started now."""
    if _provider is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")


def annotate_step(run_id: str, step: str) -> None:
    """Name the run and step on the current (task) span; see rule 1 of the module doc."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute(RUN_ID_ATTRIBUTE, run_id)
        span.set_attribute(STEP_ATTRIBUTE, step)


def record_inline_step(run_id: str, step: str) -> None:
    """A span, in the current trace, for a step done where its run was created (no task
    ran it: docpipe.state.runs.create_run does a known text's extract_text)."""
    if _provider is None:
        return
    attributes: dict[str, str | bool] = {
        RUN_ID_ATTRIBUTE: run_id,
        STEP_ATTRIBUTE: step,
        "docpipe.inline": True,
    }
    with _provider.get_tracer(__name__).start_as_current_span(
        f"inline/{step}", attributes=attributes
    ):
        pass


@contextmanager
def publish_context(run_id: str | None, traceparent: str | None) -> Iterator[None]:
    """The context to publish a run's message in (rules in the module docstring)."""
    if _provider is None or (run_id is not None and _is_task_span_of(run_id)):
        yield
        return
    stored = propagate.extract({"traceparent": traceparent}) if traceparent else None
    if stored is not None and not trace.get_current_span(stored).get_span_context().is_valid:
        stored = None
    token = otel_context.attach(stored if stored is not None else otel_context.Context())
    try:
        yield
    finally:
        otel_context.detach(token)


def _is_task_span_of(run_id: str) -> bool:
    attributes: Any = getattr(trace.get_current_span(), "attributes", None) or {}
    return bool(attributes.get(RUN_ID_ATTRIBUTE) == run_id)
