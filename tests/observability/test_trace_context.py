"""Which context a run's message is published in (docpipe.observability.tracing, "One trace per
run"), decided in-process with an in-memory span exporter: the rules one by one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from docpipe.observability import tracing

RUN = "6f1c0b6e-0000-4000-8000-000000000001"


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_provider", provider)
    yield exporter
    provider.shutdown()


def tracer() -> trace.Tracer:
    provider = tracing._provider
    assert provider is not None
    return provider.get_tracer("test")


def publish(run_id: str | None, traceparent: str | None) -> ReadableSpan:
    """What Celery's instrumentation does inside CeleryPublisher.publish: a producer span in
    the current context."""
    with tracing.publish_context(run_id, traceparent):
        span = tracer().start_span("apply_async/docpipe.run_step", kind=trace.SpanKind.PRODUCER)
        span.end()
    assert isinstance(span, ReadableSpan)
    return span


def api_request_traceparent() -> tuple[str, trace.SpanContext]:
    with tracer().start_as_current_span("POST /documents/{document_id}/extract") as request:
        traceparent = tracing.current_traceparent()
    assert traceparent is not None
    return traceparent, request.get_span_context()


def test_a_step_publishes_the_next_one_as_its_child(exported: InMemorySpanExporter) -> None:
    traceparent, _ = api_request_traceparent()
    with tracer().start_as_current_span("run/docpipe.run_step") as step:
        tracing.annotate_step(RUN, "extract_sections")
        producer = publish(RUN, traceparent)
    assert producer.parent is not None
    assert producer.parent.span_id == step.get_span_context().span_id


def test_the_sweep_publishes_under_the_stored_request_not_its_own_task(
    exported: InMemorySpanExporter,
) -> None:
    traceparent, request = api_request_traceparent()
    with tracer().start_as_current_span("run/docpipe.periodic.sweep_outbox"):
        producer = publish(RUN, traceparent)
    assert producer.parent is not None
    assert producer.parent.span_id == request.span_id
    assert producer.context.trace_id == request.trace_id


def test_another_runs_step_does_not_adopt_a_message_it_publishes(
    exported: InMemorySpanExporter,
) -> None:
    traceparent, request = api_request_traceparent()
    with tracer().start_as_current_span("run/docpipe.run_step"):
        tracing.annotate_step("another-run", "summarize")  # e.g. admitting batch runs
        producer = publish(RUN, traceparent)
    assert producer.parent is not None and producer.parent.span_id == request.span_id


def test_without_a_stored_context_a_message_starts_a_new_trace(
    exported: InMemorySpanExporter,
) -> None:
    with tracer().start_as_current_span("run/docpipe.periodic.admit_batch_runs") as tick:
        producer = publish(RUN, None)
    assert producer.parent is None
    assert producer.context.trace_id != tick.get_span_context().trace_id


def test_with_tracing_off_nothing_is_attached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_provider", None)
    before = trace.get_current_span()
    with tracing.publish_context(RUN, "00-" + "1" * 32 + "-" + "2" * 16 + "-01"):
        assert trace.get_current_span() is before
    assert tracing.current_traceparent() is None
