"""A real prefork worker serves the sum of its pool processes' metrics at /metrics, with no
PROMETHEUS_MULTIPROC_DIR given, and counts survive pool processes that exit after every
task (max_tasks_per_child=1)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from docpipe.broker.transport import CeleryPublisher
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox
from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.observability.scrape import scrape, series, total
from tests.support.factories import new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = sample_contracts(1)[0]
# extract_sections, extract_fields, summarize: a text document's extract_text is done as its
# run is created, by no worker.
STEPS = 3


def test_a_prefork_worker_serves_the_sum_of_its_pool_processes(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    port = free_port()
    worker = start_worker(
        concurrency=2,
        DOCPIPE_METRICS_PORT=str(port),
        DOCPIPE_METRICS_HOST="127.0.0.1",
        DOCPIPE_WORKER_MAX_TASKS_PER_CHILD="1",
    )
    url = f"http://127.0.0.1:{port}/metrics"
    run_ids = []
    for i in range(2):
        created = new_run(db, CONTRACT.text, key=f"k{i}", document_id=f"doc-{i}")
        publish_outbox(db, publisher, created.outbox_ids)
        run_ids.append(created.run_id)
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'done'") == 2,
        timeout_s=60,
    )

    # Each step ran in its own pool process, which exited after it: only the files they
    # left (folded into the archive when scraped) can add up to these numbers.
    samples = wait_until(
        lambda: (
            (s := scrape(url))
            and total(s, "celery_task_succeeded_total", name="docpipe.run_step") == 2 * STEPS
            and s
        ),
        timeout_s=10,
    )
    assert total(samples, "celery_task_started_total", queue_name="llm_interactive") == 2 * STEPS
    assert total(samples, "celery_task_runtime_count", name="docpipe.run_step") == 2 * STEPS
    assert total(samples, "celery_task_queue_wait_time_count") == 2 * STEPS
    assert total(samples, "docpipe_step_duration_seconds_count", outcome="completed") == 2 * STEPS
    assert total(samples, "docpipe_runs_finished_total", status="done", lane="interactive") == 2
    calls = scalar(db, "SELECT count(*) FROM llm_call_log")
    assert total(samples, "docpipe_provider_calls_total", outcome="ok", status_code="200") == calls
    cost = float(scalar(db, "SELECT sum(cost_usd) FROM llm_call_log"))
    assert total(samples, "docpipe_cost_usd_total", tenant="acme") == pytest.approx(cost)
    assert total(samples, "celery_worker_tasks_active") == 0
    hostname = next(s["hostname"] for s in series(samples, "celery_worker_up"))
    assert total(samples, "celery_worker_up", hostname=hostname) == 1
    assert total(samples, "docpipe_worker_concurrency", queue_name="llm_interactive") == 2
    assert total(samples, "docpipe_worker_concurrency", queue_name="docpipe_periodic") == 2
    # The directory was created for the worker, and exited processes left no files behind
    # but the archives: one set for the main process and each live pool process at most.
    directory = Path(re.findall(r"keep their metrics in (\S+)", worker.log_text())[0])
    files = {f.name for f in directory.glob("*.db")}
    assert {"counter_archive.db", "histogram_archive.db"} <= files
    pids = {int(f.split("_")[-1][:-3]) for f in files if f.split("_")[-1][:-3].isdigit()}
    assert len(pids) <= 3, files
    worker.stop()
    assert not directory.exists(), "the private directory is removed when the worker exits"


def test_a_threads_worker_serves_its_slots_and_its_oldest_step(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """12 slots, 8 steps waiting 3 s on the provider: 8 in use, 4 free, the oldest step a
    second or more in; when they are done, the steps' counters as from a prefork pool."""
    fake_llm.control("POST", "/control/config", json={"latency_ms": [3000, 3000]})
    port = free_port()
    start_worker(
        concurrency=12,
        DOCPIPE_WORKER_POOL="threads",
        DOCPIPE_METRICS_PORT=str(port),
        DOCPIPE_METRICS_HOST="127.0.0.1",
    )
    url = f"http://127.0.0.1:{port}/metrics"
    for i in range(8):
        created = new_run(db, CONTRACT.text, key=f"k{i}", document_id=f"doc-{i}")
        publish_outbox(db, publisher, created.outbox_ids)
    busy = wait_until(
        lambda: (
            (s := scrape(url))
            and total(s, "docpipe_worker_slots_in_use") == 8
            and total(s, "docpipe_worker_oldest_step_age_seconds") >= 1
            and s
        ),
        timeout_s=30,
        every_s=0.2,
    )
    assert total(busy, "docpipe_worker_slots", pool="threads") == 12
    assert total(busy, "docpipe_worker_slots_free") == 4
    assert total(busy, "docpipe_worker_oldest_step_age_seconds") < 30
    # Seen busy: the steps after these go at full speed (the calls in flight keep the 3 s
    # the provider chose when they came; at 3 s a call, the runs' later steps took 12 s).
    fake_llm.control("POST", "/control/config", json={"latency_ms": [0, 0]})
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'done'") == 8,
        timeout_s=120,
    )
    idle = wait_until(
        lambda: (s := scrape(url)) and total(s, "docpipe_worker_slots_in_use") == 0 and s,
        timeout_s=10,
    )
    assert total(idle, "docpipe_worker_oldest_step_age_seconds") == 0
    assert total(idle, "celery_task_succeeded_total", name="docpipe.run_step") == 8 * STEPS
    assert total(idle, "docpipe_runs_finished_total", status="done", lane="interactive") == 8
