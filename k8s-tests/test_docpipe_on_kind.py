"""docpipe on Kubernetes, with the chaos a cluster brings: pods deleted mid-step, beat
replaced, worker pools restarted under load, the broker lost. Every run still finishes, and
no finished step is paid for twice."""

from __future__ import annotations

import itertools
import time
from datetime import datetime

import pytest
import release_names as names
from kube import Docpipe, wait_for

from docpipe.cli.client import DocpipeClient
from docpipe_dev.samples import sample_contracts

# The first test also installs the release (images of PostgreSQL and Redis may be pulled).
pytestmark = pytest.mark.timeout(1800)
SAMPLES = sample_contracts(200)


def submit(docpipe: Docpipe, indexes: range | list[int], lane: str, key: str) -> list[str]:
    """Upload sample contracts and start one run each; the run ids."""
    runs = []
    with DocpipeClient(docpipe.api_url()) as api:
        for i in indexes:
            sample = SAMPLES[i]
            api.put_document(sample.slug, sample.text)
            run = api.extract(sample.slug, idempotency_key=f"{key}-{i}", lane=lane)
            runs.append(str(run["run_id"]))
    return runs


def assert_all_done(docpipe: Docpipe, runs: list[str]) -> None:
    statuses = docpipe.wait_until_ended(runs)
    assert sorted(set(statuses.values())) == ["done"], statuses


def assert_all_done_and_step_1_paid_once(docpipe: Docpipe, runs: list[str]) -> None:
    assert_all_done(docpipe, runs)
    rows = docpipe.sql(
        "SELECT count(*) FROM llm_call_log WHERE run_id = ANY(%s::uuid[])"
        " AND step = 'extract_sections' GROUP BY run_id",
        runs,
    )
    assert sorted(n for (n,) in rows) == [1] * len(runs), "step 1 was paid twice"


def test_the_release_is_up_with_one_beat_and_the_schema_applied(docpipe: Docpipe) -> None:
    assert len(docpipe.running_pods(names.BEAT)) == 1
    beat = docpipe.apps.read_namespaced_deployment(names.BEAT_DEPLOYMENT, docpipe.namespace)
    assert beat.spec.replicas == 1 and beat.spec.strategy.type == "Recreate"
    assert docpipe.sql("SELECT count(*) FROM docpipe_migration")[0][0] >= 1
    assert docpipe.http(*names.API, "GET", "/readyz")["status"] == "ready"


def test_sample_contracts_go_through_both_pools(docpipe: Docpipe) -> None:
    runs = submit(docpipe, range(0, 4), "interactive", "e2e") + submit(
        docpipe, range(4, 8), "batch", "e2e"
    )
    assert_all_done_and_step_1_paid_once(docpipe, runs)


def test_worker_pod_deleted_mid_step_2_resumes_without_rerunning_step_1(docpipe: Docpipe) -> None:
    docpipe.fake_llm("POST", "/control/config", {"latency_ms": [500, 500]})
    try:
        (run,) = submit(docpipe, [8], "interactive", "kill-worker")
        wait_for(
            lambda: docpipe.calls(run, "extract_fields", "ok") >= 2,
            "step 2 under way",
            timeout_s=120,
            every_s=0.2,
        )
        (pod,) = docpipe.running_pods(names.WORKER, names.INTERACTIVE)
        docpipe.delete_pod(pod, grace_period_s=0)  # a crash, not a drain
        assert_all_done_and_step_1_paid_once(docpipe, [run])
    finally:
        docpipe.fake_llm("POST", "/control/reset")
    attempts = docpipe.step_attempts(run)
    assert attempts["extract_sections"] == 1
    assert attempts["extract_fields"] >= 2, "step 2 was not handed to the new pod"
    new = docpipe.running_pods(names.WORKER, names.INTERACTIVE)
    assert [p.metadata.name for p in new] != [pod.metadata.name]


def test_beat_pod_deleted_gives_one_new_beat_and_no_double_firing(docpipe: Docpipe) -> None:
    configmap = docpipe.core.read_namespaced_config_map(names.CONFIGMAP, docpipe.namespace)
    interval = float(configmap.data[names.REAPER_INTERVAL_KEY])
    (old,) = docpipe.running_pods(names.BEAT)
    starts: list[datetime] = []

    def record_start() -> None:
        (started,) = docpipe.sql(
            "SELECT last_started_at FROM periodic_job"
            " WHERE name = 'docpipe.periodic.recover_stalled_work'"
        )[0]
        if not starts or started != starts[-1]:
            starts.append(started)

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        record_start()
        time.sleep(0.1)
    docpipe.delete_pod(old)  # graceful: the replacement starts while the old one stops
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        record_start()
        time.sleep(0.1)

    beats = wait_for(
        lambda: len(docpipe.pods(names.BEAT)) == 1 and docpipe.running_pods(names.BEAT),
        "a single beat pod",
        timeout_s=120,
    )
    assert beats[0].metadata.name != old.metadata.name
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert len(gaps) >= 10, "the reaper stopped firing"
    assert min(gaps) >= 0.8 * interval - 0.05, f"fired twice within one interval: {min(gaps)}s"


def test_rolling_restart_of_both_pools_during_a_200_document_batch_loses_nothing(
    docpipe: Docpipe,
) -> None:
    runs = submit(docpipe, range(len(SAMPLES)), "batch", "rolling")
    interactive = submit(docpipe, range(0, 10), "interactive", "rolling")
    wait_for(
        lambda: sum(s == "done" for s in docpipe.run_statuses(runs).values()) >= 20,
        "the batch under way",
        every_s=2,
    )
    for pool in names.POOLS:
        docpipe.restart_deployment(names.worker_deployment(pool))
    done_at_restart = sum(s == "done" for s in docpipe.run_statuses(runs).values())
    assert done_at_restart < len(runs), "the batch finished before the restart"
    docpipe.wait_for_rollouts()
    assert_all_done_and_step_1_paid_once(docpipe, runs + interactive)


def test_redis_pod_deleted_every_run_still_completes(docpipe: Docpipe) -> None:
    runs = submit(docpipe, range(20, 40), "batch", "redis") + submit(
        docpipe, range(40, 45), "interactive", "redis"
    )
    wait_for(
        lambda: sum(s == "done" for s in docpipe.run_statuses(runs).values()) >= 3,
        "runs under way",
        every_s=1,
    )
    (redis,) = docpipe.running_pods(names.REDIS)
    docpipe.delete_pod(redis)  # the broker comes back empty (no persistence)
    wait_for(lambda: docpipe.running_pods(names.REDIS), "a new Redis pod", timeout_s=120)
    # Steps running when the connection dropped are cancelled and run again (their finished
    # calls stay memoised), so only completion is asserted here.
    assert_all_done(docpipe, runs)
