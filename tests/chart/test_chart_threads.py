"""A batch lane of threads, as values.yaml suggests it (tests.chart.helm.THREADS_LANE): one
process of 200 slots per pod, KEDA adding a pod per 200 steps waiting, runs admitted for
every pod KEDA may add, and the pages each pod reads at once bounded."""

from __future__ import annotations

from docpipe_dev.stack import THREADS_POOL_ENV
from tests.chart.helm import KEDA_API, THREADS_LANE, env_of, named, render


def test_a_threads_batch_lane_runs_its_slots_in_one_process_and_scales_per_slots() -> None:
    rendered = render(THREADS_LANE, api_versions=[KEDA_API])
    batch = named(rendered, "Deployment", "docpipe-worker-batch")
    worker = batch["spec"]["template"]["spec"]["containers"][0]
    assert worker["args"][worker["args"].index("--concurrency") + 1] == "200"
    assert env_of(worker)["DOCPIPE_WORKER_POOL"] == "threads"
    assert "replicas" not in batch["spec"], "KEDA sets the replicas"
    scaled = named(rendered, "ScaledObject", "docpipe-worker-batch")
    assert scaled["spec"]["maxReplicaCount"] == 10
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["metadata"]["listName"] == "llm_batch"
    assert trigger["metadata"]["listLength"] == "200"
    config = named(rendered, "ConfigMap", "docpipe")["data"]
    # Every pod KEDA may add finds runs waiting: window = maxReplicas x slots.
    assert config["DOCPIPE_BATCH_ADMISSION_WINDOW"] == "2000"
    assert config["DOCPIPE_WORKER_PAGE_READS"] == "2"
    interactive = named(rendered, "Deployment", "docpipe-worker-interactive")
    assert (
        env_of(interactive["spec"]["template"]["spec"]["containers"][0])["DOCPIPE_WORKER_POOL"]
        == "prefork"
    )


def test_a_threads_pool_runs_malloc_without_thread_caches_and_a_prefork_pool_does_not() -> None:
    """Issue 37: a threads worker of 200 slots held 0.87-0.89 MB of PSS per step in flight
    with glibc's per-thread caches off and two arenas, 1.00-1.13 MB with its defaults."""
    rendered = render(THREADS_LANE, api_versions=[KEDA_API])
    env = {
        lane: env_of(
            named(rendered, "Deployment", f"docpipe-worker-{lane}")["spec"]["template"]["spec"][
                "containers"
            ][0]
        )
        for lane in ("batch", "interactive")
    }
    assert env["batch"]["DOCPIPE_WORKER_POOL"] == "threads"
    # The value `docpipe stack up` gives its threads workers: one setting, two places.
    assert env["batch"]["GLIBC_TUNABLES"] == THREADS_POOL_ENV["GLIBC_TUNABLES"]
    assert env["interactive"]["DOCPIPE_WORKER_POOL"] == "prefork"
    assert "GLIBC_TUNABLES" not in env["interactive"]
