"""One trace per document: `POST /documents/{id}/extract` and every step of its run, with
their provider calls, form one trace across the outbox and the queue — exported by a real
uvicorn API and real prefork workers (whose pool processes exit after every task, so their
spans survive only if they are flushed on exit) to an OTLP/HTTP receiver in this test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from tests.observability.conftest import CONTRACTS, extract
from tests.observability.otlp import OTLPReceiver, ReceivedSpan, otlp_receiver
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow

# extract_text reads the document and asks no model (a text document's is done by the API
# as it creates the run); the others ask the provider.
STEPS = ("extract_text", "extract_sections", "extract_fields", "summarize")


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    with otlp_receiver() as r:
        yield r


def otel_env(receiver: OTLPReceiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


class Trace:
    def __init__(self, spans: list[ReceivedSpan]) -> None:
        self.spans = spans
        self.by_id = {s.span_id: s for s in spans}

    def parent(self, span: ReceivedSpan) -> ReceivedSpan:
        assert span.parent_id is not None, f"{span.name} has no parent"
        assert span.parent_id in self.by_id, f"the parent of {span.name} was not exported"
        return self.by_id[span.parent_id]

    def step_span(self, run_id: str, step: str) -> ReceivedSpan:
        found = [
            s
            for s in self.spans
            if s.kind == "consumer"
            and s.attributes.get("docpipe.run_id") == run_id
            and s.attributes.get("docpipe.step") == step
        ]
        assert len(found) == 1, f"{step} ran {len(found)} times"
        return found[0]

    def children(self, span: ReceivedSpan, kind: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.parent_id == span.span_id and s.kind == kind]


def api_span(spans: list[ReceivedSpan], document_id: str) -> ReceivedSpan:
    [span] = [
        s
        for s in spans
        if s.kind == "server"
        and s.attributes.get("http.route") == "/documents/{document_id}/extract"
        and document_id in str(s.attributes.get("url.path", s.attributes.get("http.target")))
    ]
    return span


def run_done(db: Database, run_id: str) -> bool:
    return scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id) == "done"


def test_an_extract_request_and_all_steps_of_its_run_form_one_trace(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    receiver: OTLPReceiver,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
    start_api: Callable[..., str],
) -> None:
    # Nothing is lost here: no step's message may be sent again as if it were. A pool process
    # starts for every task, so a message can wait in the worker's hands past the suite's
    # 3 s redrive grace before its step is claimed.
    env = {**otel_env(receiver), "DOCPIPE_REDRIVE_GRACE_S": "20"}
    # A pool process exits after each task and would export on its own only after a minute:
    # every worker span here is one flushed by the exiting process.
    start_worker(
        concurrency=2,
        DOCPIPE_WORKER_MAX_TASKS_PER_CHILD="1",
        **{**env, "OTEL_BSP_SCHEDULE_DELAY": "60000"},
    )
    start_beat(**env)
    api = start_api(**env)

    # Run A is published by the API right after its commit; run B starts later, so its
    # first message waits in the outbox and the sweep (a periodic task) publishes it.
    run_a = extract(api, "doc-a", CONTRACTS[0].text)
    start_at = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    stored = httpx.put(
        f"{api}/documents/doc-b",
        content=CONTRACTS[1].text.encode(),
        headers={"Content-Type": "text/plain"},
        timeout=10,
    )
    assert stored.status_code == 201
    started = httpx.post(
        f"{api}/documents/doc-b/extract",
        json={"start_at": start_at},
        headers={"Idempotency-Key": "doc-b"},
        timeout=10,
    )
    assert started.status_code == 202, started.text
    run_b = started.json()["run_id"]
    wait_until(lambda: run_done(db, run_a) and run_done(db, run_b), timeout_s=60)

    def exported(run_id: str) -> bool:
        steps = {
            s.attributes.get("docpipe.step")
            for s in receiver.spans
            if s.attributes.get("docpipe.run_id") == run_id
        }
        return set(STEPS) <= steps

    wait_until(lambda: exported(run_a) and exported(run_b), timeout_s=20)
    spans = receiver.spans
    assert {s.service for s in spans} == {"docpipe-api", "docpipe-worker"}

    for document_id, run_id in (("doc-a", run_a), ("doc-b", run_b)):
        request = api_span(spans, document_id)
        trace = Trace([s for s in spans if s.trace_id == request.trace_id])
        in_run = {s.trace_id for s in spans if s.attributes.get("docpipe.run_id") == run_id}
        assert in_run == {request.trace_id}, "every step of the run is in the request's trace"

        # A text document's extract_text is done by the API as it creates the run (no
        # message, no task): its span is the request's child, and the request publishes next.
        [inline] = [s for s in trace.spans if s.attributes.get("docpipe.step") == STEPS[0]]
        assert inline.name == f"inline/{STEPS[0]}" and trace.parent(inline) == request
        previous = request
        for step in STEPS[1:]:
            task = trace.step_span(run_id, step)
            publish = trace.parent(task)
            assert publish.kind == "producer"
            assert publish.name == "apply_async/docpipe.run_step"
            assert trace.parent(publish) == previous, f"{step} follows {previous.name}"
            calls = trace.children(task, "client")
            provider_calls = [c for c in calls if "chat/completions" in str(c.attributes)]
            sent = scalar(
                db,
                "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND step = %s",
                run_id,
                step,
            )
            assert len(provider_calls) == sent, f"{step}: one span per provider call"
            assert sent > 0, f"{step}: calls {sent}"
            assert any(c.attributes.get("db.system") == "postgresql" for c in calls)
            previous = task

    # Run B's first message was published by the sweep in a worker, under the stored
    # request context, not under the periodic task it ran in.
    b_trace = Trace([s for s in spans if s.trace_id == api_span(spans, "doc-b").trace_id])
    first_publish = b_trace.parent(b_trace.step_span(run_b, STEPS[1]))
    assert first_publish.service == "docpipe-worker"
    # Periodic maintenance is not traced (several ticks a second would bury the runs).
    assert not [s for s in spans if "docpipe.state.periodic" in s.name]
