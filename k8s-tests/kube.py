"""What the k8s-tests need from a cluster: the release installed with Helm's engine
(helm-python-sdk, no helm binary), pods and rollouts through the kubernetes client,
`kubectl port-forward` to the API, the fake provider and PostgreSQL, and diagnostics."""

from __future__ import annotations

import base64
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import release_names as names
from kubernetes import client

REPO = Path(__file__).resolve().parent.parent
CHART_DIR = REPO / "charts" / "docpipe"
ENDED = ("done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded")


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 300, every_s: float = 1):
    """The first truthy value of ``predicate()``; TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:g}s")


@dataclass
class PortForward:
    """`kubectl port-forward` to a Service, restarted when its pod went away."""

    namespace: str
    target: str  # e.g. service/docpipe-api
    remote_port: int
    proc: subprocess.Popen[str] | None = None
    local_port: int = 0

    def url(self) -> str:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        return f"http://127.0.0.1:{self.local_port}"

    def restart(self) -> None:
        self.stop()
        self._start()

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "kubectl",
                "-n",
                self.namespace,
                "port-forward",
                self.target,
                f":{self.remote_port}",
                "--address",
                "127.0.0.1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"127\.0\.0\.1:(\d+) ->", line)
        if not match:
            self.stop()
            raise RuntimeError(f"port-forward {self.target} failed: {line.strip()}")
        self.local_port = int(match.group(1))

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@dataclass
class Docpipe:
    """The installed release: its namespace, API, fake provider and database."""

    namespace: str
    core: client.CoreV1Api = field(default_factory=client.CoreV1Api)
    apps: client.AppsV1Api = field(default_factory=client.AppsV1Api)
    forwards: dict[str, PortForward] = field(default_factory=dict)

    # --- reaching the services -------------------------------------------------------

    def forward(self, service: str, port: int) -> PortForward:
        if service not in self.forwards:
            self.forwards[service] = PortForward(self.namespace, f"service/{service}", port)
        return self.forwards[service]

    def http(self, service: str, port: int, method: str, path: str, **kwargs: Any) -> Any:
        """One request through the service's port-forward, re-established once if it broke."""
        forward = self.forward(service, port)
        for attempt in (1, 2):
            try:
                response = httpx.request(method, forward.url() + path, timeout=30, **kwargs)
                response.raise_for_status()
                return response.json()
            except httpx.TransportError:
                if attempt == 2:
                    raise
                forward.restart()
        raise AssertionError("unreachable")

    def api_url(self) -> str:
        return self.forward(*names.API).url()

    def fake_llm(self, method: str, path: str, json: Any = None) -> Any:
        return self.http(*names.FAKE_LLM, method, path, json=json)

    def secret_value(self, key: str) -> str:
        secret = self.core.read_namespaced_secret(names.SECRET, self.namespace)
        return base64.b64decode(secret.data[key]).decode()

    def sql(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        """Rows of a query on the release's PostgreSQL (through a port-forward)."""
        forward = self.forward(*names.POSTGRESQL)
        password = quote(self.secret_value(names.POSTGRES_PASSWORD_KEY), safe="")
        for attempt in (1, 2):
            try:
                port = forward.url().rsplit(":", 1)[1]
                user, database = names.DATABASE_USER, names.DATABASE_NAME
                url = f"postgresql://{user}:{password}@127.0.0.1:{port}/{database}"
                with psycopg.connect(url, connect_timeout=10) as conn:
                    return conn.execute(query.encode(), params).fetchall()
            except psycopg.OperationalError:
                if attempt == 2:
                    raise
                forward.restart()
        raise AssertionError("unreachable")

    # --- pods and rollouts -----------------------------------------------------------

    def pods(self, component: str, pool: str | None = None) -> list[client.V1Pod]:
        selector = names.pod_selector(component, pool)
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def running_pods(self, component: str, pool: str | None = None) -> list[client.V1Pod]:
        return [
            p
            for p in self.pods(component, pool)
            if p.metadata.deletion_timestamp is None and p.status.phase == "Running"
        ]

    def rollout_done(self, deployment: str) -> bool:
        d = self.apps.read_namespaced_deployment(deployment, self.namespace)
        want = d.spec.replicas or 0
        s = d.status
        return bool(
            (s.observed_generation or 0) >= d.metadata.generation
            and (s.updated_replicas or 0) == want
            and (s.available_replicas or 0) == want
            and (s.replicas or 0) == want
        )

    def wait_for_rollouts(self, timeout_s: float = 600) -> None:
        for d in self.apps.list_namespaced_deployment(self.namespace).items:
            name = d.metadata.name
            wait_for(lambda n=name: self.rollout_done(n), f"rollout of {name}", timeout_s)

    def restart_deployment(self, name: str) -> None:
        """`kubectl rollout restart`."""
        stamp = datetime.now(UTC).isoformat()
        patch = {
            "spec": {
                "template": {
                    "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}
                }
            }
        }
        self.apps.patch_namespaced_deployment(name, self.namespace, patch)

    def delete_pod(self, pod: client.V1Pod, *, grace_period_s: int | None = None) -> None:
        self.core.delete_namespaced_pod(
            pod.metadata.name, self.namespace, grace_period_seconds=grace_period_s
        )

    # --- runs ------------------------------------------------------------------------

    def run_statuses(self, run_ids: list[str]) -> dict[str, str]:
        rows = self.sql(
            "SELECT id::text, status FROM pipeline_run WHERE id = ANY(%s::uuid[])", run_ids
        )
        return dict(rows)  # type: ignore[arg-type]

    def wait_until_ended(self, run_ids: list[str], timeout_s: float = 600) -> dict[str, str]:
        def ended() -> dict[str, str] | None:
            statuses = self.run_statuses(run_ids)
            done = len(statuses) == len(run_ids) and all(s in ENDED for s in statuses.values())
            return statuses if done else None

        return wait_for(ended, f"{len(run_ids)} runs ended", timeout_s, every_s=2)

    def step_attempts(self, run_id: str) -> dict[str, int]:
        rows = self.sql(
            "SELECT step, attempt FROM pipeline_step_result WHERE run_id = %s::uuid", run_id
        )
        return {step: int(attempt) for step, attempt in rows}

    def calls(self, run_id: str, step: str, status: str | None = None) -> int:
        rows = self.sql(
            "SELECT count(*) FROM llm_call_log WHERE run_id = %s::uuid AND step = %s"
            " AND (%s::text IS NULL OR status = %s)",
            run_id,
            step,
            status,
            status,
        )
        return int(rows[0][0])

    def close(self) -> None:
        for forward in self.forwards.values():
            forward.stop()


def save_diagnostics(namespace: str, folder: Path) -> None:
    """`kubectl describe`, events and every container's logs (and previous logs) to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)

    def kubectl(*args: str) -> str:
        result = subprocess.run(
            ["kubectl", "-n", namespace, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return result.stdout + result.stderr

    (folder / "describe-pods.txt").write_text(kubectl("describe", "pods"))
    (folder / "describe-workloads.txt").write_text(
        kubectl("describe", "deployments,statefulsets,jobs,replicasets")
    )
    (folder / "events.txt").write_text(kubectl("get", "events", "--sort-by=.lastTimestamp"))
    pods = kubectl("get", "pods", "-o", "name").split()
    for pod in pods:
        name = pod.removeprefix("pod/")
        (folder / f"{name}.log").write_text(kubectl("logs", pod, "--all-containers", "--prefix"))
        previous = kubectl("logs", pod, "--all-containers", "--prefix", "--previous")
        if "previous terminated container" not in previous:
            (folder / f"{name}.previous.log").write_text(previous)
