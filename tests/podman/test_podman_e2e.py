"""The chart's workloads, run from the real images with podman against a local PostgreSQL and
Redis: migrations gate the pods, the sample contracts go through both worker pools, a worker
container SIGKILLed in the middle of step 2 is restarted and the run finishes without paying
for step 1 again, probes pass inside the containers, and SIGTERM stops every process cleanly.

Opt-in (see conftest.py): `make podman-e2e` builds the images and runs this module.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from docpipe.cli.client import DocpipeClient
from docpipe_dev.localstack import LocalPostgres, LocalRedis, free_port
from docpipe_dev.samples import sample_contracts
from tests.chart.helm import render, values_file
from tests.podman.pods import Manifests, Obj, podman

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
LOG_DIR = REPO / ".local" / "podman-e2e"
ENDED = {"done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded"}
SAMPLES = sample_contracts(8)


@dataclass
class Stack:
    manifests: Manifests
    database_url: str
    api_url: str
    fake_url: str
    prefix: str
    files_dir: Path
    containers: dict[str, Obj] = field(default_factory=dict)  # name -> container spec

    def name(self, component: str) -> str:
        return f"{self.prefix}-{component}"

    def run(self, workload: Obj, container: Obj, component: str, *, detach: bool) -> str:
        name = self.name(component)
        args = self.manifests.podman_run_args(
            workload, container, name=name, files_dir=self.files_dir, hosts=["docpipe-fake-llm"]
        )
        self.containers[name] = container
        if detach:
            podman("run", "-d", *args)
        else:
            result = podman("run", *args, check=False, timeout=300)
            assert result.returncode == 0, f"{name} exited {result.returncode}:\n{result.stdout}"
        return name

    def start_pod(self, kind: str, workload_name: str, component: str) -> str:
        """Init containers to completion, then the main container, detached."""
        workload = self.manifests.workload(kind, workload_name)
        pod = workload["spec"]["template"]["spec"]
        for init in pod.get("initContainers", []):
            self.run(workload, init, f"{component}-{init['name']}", detach=False)
        return self.run(workload, pod["containers"][0], component, detach=True)

    def logs(self, name: str) -> str:
        result = podman("logs", name, check=False)
        return result.stdout + result.stderr

    def exit_code(self, name: str) -> int:
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip())


def wait_for(predicate: Any, what: str, timeout_s: float = 120, every_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:g}s")


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def query(database_url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql.encode(), params).fetchall()


@pytest.fixture(scope="module")
def images() -> None:
    missing = [
        c
        for c in ("api", "worker-interactive", "worker-batch", "beat", "fake-llm")
        if podman("image", "exists", f"localhost/docpipe/{c}:dev", check=False).returncode
    ]
    assert not missing, f"images missing: {missing}; run make images (make podman-e2e does)"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str, Path]]:
    """PostgreSQL and Redis on free ports, plus a directory uid 10001 can read."""
    state = Path(tempfile.mkdtemp(prefix="docpipe-podman-e2e-"))
    state.chmod(0o711)
    try:
        with LocalPostgres(state / "postgres") as pg, LocalRedis(state / "redis") as redis:
            yield pg.create_database("docpipe"), redis.url, state
    finally:
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def stack(images: None, servers: tuple[str, str, Path]) -> Iterator[Stack]:
    database_url, redis_url, state = servers
    api_port, fake_port = free_port(), free_port()
    values = values_file("values-kind.yaml")
    values.update(
        postgresql={"enabled": False},
        redis={"enabled": False},
        secrets={"databaseUrl": database_url, "redisUrl": redis_url, "llmApiKey": "e2e"},
    )
    values["api"]["port"] = api_port
    values["fakeLlm"].update(port=fake_port, latencyMs="250:250")
    stack = Stack(
        manifests=Manifests(render(values)),
        database_url=database_url,
        api_url=f"http://127.0.0.1:{api_port}",
        fake_url=f"http://127.0.0.1:{fake_port}",
        prefix=f"docpipe-e2e-{uuid.uuid4().hex[:6]}",
        files_dir=state / "files",
    )
    started = time.monotonic()
    try:
        start(stack)
        print(f"\nstack up in {time.monotonic() - started:.1f}s")
        yield stack
    finally:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        for name in stack.containers:
            (LOG_DIR / f"{name.removeprefix(stack.prefix + '-')}.log").write_text(stack.logs(name))
            podman("rm", "--force", "--time", "5", name, check=False)
        print(f"container logs: {LOG_DIR}")


def start(stack: Stack) -> None:
    m = stack.manifests
    stack.start_pod("Deployment", "docpipe-fake-llm", "fake-llm")
    wait_for(lambda: http_ok(f"{stack.fake_url}/healthz"), "fake provider /healthz")

    # The API's init container starts before the schema exists and must wait for it.
    api = m.workload("Deployment", "docpipe-api")
    init = api["spec"]["template"]["spec"]["initContainers"][0]
    api_init = stack.run(api, init, "api-wait-for-schema", detach=True)
    time.sleep(3)
    assert podman("inspect", "--format", "{{.State.Running}}", api_init).stdout.strip() == "true"

    stack.start_pod("Job", "docpipe-migrate", "migrate")  # detached main: wait for it below
    assert podman("wait", stack.name("migrate"), timeout=120).stdout.strip() == "0"
    assert podman("wait", api_init, timeout=60).stdout.strip() == "0"
    assert "schema is up to date" in stack.logs(api_init)

    stack.run(api, api["spec"]["template"]["spec"]["containers"][0], "api", detach=True)
    for pool in ("interactive", "batch"):
        stack.start_pod("Deployment", f"docpipe-worker-{pool}", f"worker-{pool}")
    stack.start_pod("Deployment", "docpipe-beat", "beat")
    wait_for(lambda: http_ok(f"{stack.api_url}/readyz"), "API /readyz", timeout_s=60)
    for pool in ("interactive", "batch"):
        name = stack.name(f"worker-{pool}")
        wait_for(lambda n=name: " ready." in stack.logs(n), f"{name} ready", timeout_s=90)


def submit(client: DocpipeClient, index: int, lane: str) -> str:
    sample = SAMPLES[index]
    client.put_document(sample.slug, sample.text)
    return str(client.extract(sample.slug, idempotency_key=f"e2e-{index}", lane=lane)["run_id"])


def fields_calls_ok(stack: Stack, run_id: str) -> int:
    rows = query(
        stack.database_url,
        "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND step = 'extract_fields'"
        " AND status = 'ok'",
        run_id,
    )
    return int(rows[0][0])


def test_probes_pass_inside_the_running_containers(stack: Stack) -> None:
    for component in ("worker-interactive", "worker-batch", "beat"):
        name = stack.name(component)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            command = stack.containers[name][probe]["exec"]["command"]
            result = podman("exec", name, *command, check=False)
            assert result.returncode == 0, f"{name} {probe}: {result.stderr}"
    for path in ("/healthz", "/readyz"):
        assert http_ok(stack.api_url + path)
    # The probe does fail on a stale heartbeat (an hour-old file).
    name = stack.name("beat")
    command = stack.containers[name]["livenessProbe"]["exec"]["command"]
    stale = command[2].replace('"$DOCPIPE_LIVENESS_FILE"', "/tmp/stale")
    podman("exec", name, "touch", "-d", "@0", "/tmp/stale")
    assert podman("exec", name, command[0], command[1], stale, check=False).returncode != 0


def test_samples_finish_and_a_worker_killed_mid_step_2_resumes_without_repaying_step_1(
    stack: Stack,
) -> None:
    started = time.monotonic()
    worker = stack.name("worker-interactive")
    with DocpipeClient(stack.api_url) as client:
        target = submit(client, 0, "interactive")
        batch = [submit(client, i, "batch") for i in range(1, 6)]
        wait_for(lambda: fields_calls_ok(stack, target) >= 2, "step 2 under way", every_s=0.05)

        podman("kill", "--signal", "KILL", worker)
        killed_at = time.monotonic()
        assert podman("wait", worker).stdout.strip() == "137"
        podman("start", worker)  # what the kubelet does to a dead container
        interactive = [submit(client, i, "interactive") for i in (6, 7)]

        runs = [target, *batch, *interactive]

        def all_ended() -> dict[str, Any] | None:
            states = {run: client.run(run) for run in runs}
            return states if all(s["status"] in ENDED for s in states.values()) else None

        final = wait_for(all_ended, "every run ended", timeout_s=300, every_s=1)
    elapsed = time.monotonic() - started
    assert {r: v["status"] for r, v in final.items()} == dict.fromkeys(runs, "done")

    attempts = dict(
        query(
            stack.database_url,
            "SELECT step, attempt FROM pipeline_step_result WHERE run_id = %s",
            target,
        )
    )
    assert attempts["extract_sections"] == 1, "step 1 ran again"
    assert attempts["extract_fields"] >= 2, "step 2 was not resumed by another attempt"
    step_1_calls = query(
        stack.database_url,
        "SELECT run_id, count(*) FROM llm_call_log WHERE step = 'extract_sections' GROUP BY run_id",
    )
    assert sorted(n for _, n in step_1_calls) == [1] * len(runs), "step 1 was paid twice"
    resumed = query(
        stack.database_url,
        "SELECT max(n) FROM (SELECT count(*) AS n FROM llm_call_log WHERE run_id = %s"
        " AND step = 'extract_fields' AND status = 'ok' GROUP BY call_key) per_call",
        target,
    )
    assert resumed[0][0] == 1, "a finished call of step 2 was sent again"
    print(
        f"\n{len(runs)} runs done in {elapsed:.1f}s; the killed run finished "
        f"{time.monotonic() - killed_at:.1f}s after the kill (step 2 attempts: "
        f"{attempts['extract_fields']})"
    )


def test_every_container_runs_its_entry_point_as_pid_1(stack: Stack) -> None:
    """Exec form: PID 1 is the process itself (no shell in between), as uid 10001."""
    for component, program in (
        ("worker-interactive", "celery"),
        ("worker-batch", "celery"),
        ("beat", "celery"),
        ("api", "uvicorn"),
        ("fake-llm", "docpipe_fake_llm"),
    ):
        name = stack.name(component)
        argv = podman("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
        assert Path(argv[0]).name.startswith("python"), argv  # the console script's shebang
        assert Path(argv[1]).name == program or argv[1:3] == ["-m", program], argv
        assert podman("exec", name, "id", "-u").stdout.strip() == "10001"


def test_sigterm_stops_every_process_cleanly(stack: Stack) -> None:
    for component in ("api", "beat", "worker-batch", "worker-interactive", "fake-llm"):
        name = stack.name(component)
        podman("stop", "--time", "90", name, timeout=120)
        assert stack.exit_code(name) == 0, f"{name}:\n{stack.logs(name)[-2000:]}"
    assert "warm shutdown" in stack.logs(stack.name("worker-batch")).lower()
