"""docpipe on a real cluster (kind): the release is installed once per session from
charts/docpipe with values-kind.yaml into a fresh namespace, then the tests run against it.

The whole suite skips, with one line saying why, when no cluster is reachable through the
current kube context. On a failure, `kubectl describe`, events and every container's logs
are saved under .local/k8s-tests/<test>/. DOCPIPE_K8S_KEEP=1 keeps the namespace afterwards.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import helm_python
import pytest
import yaml
from kube import CHART_DIR, REPO, Docpipe, save_diagnostics
from kubernetes import client, config
from release_names import RELEASE

ARTIFACTS = REPO / ".local" / "k8s-tests"


def _cluster_problem() -> str | None:
    """Why no cluster can be used, or None when the current context answers."""
    try:
        config.load_kube_config()
        _, context = config.list_kube_config_contexts()
    except Exception as exc:  # no kubeconfig, no current context, unreadable file
        return f"no kube context ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    try:
        client.VersionApi().get_code(_request_timeout=5)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
        return f"context {context['name']!r} does not answer ({type(exc).__name__}: {first})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if problem := _cluster_problem():
        skip = pytest.mark.skip(reason=f"no Kubernetes cluster reachable: {problem}")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def namespace() -> Iterator[str]:
    name = os.environ.get("DOCPIPE_K8S_NAMESPACE") or f"docpipe-e2e-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api()
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    if os.environ.get("DOCPIPE_K8S_KEEP") != "1":
        core.delete_namespace(name)


@pytest.fixture(scope="session")
def docpipe(namespace: str) -> Iterator[Docpipe]:
    """The release, installed with Helm's engine and rolled out; uninstalled afterwards."""
    values = yaml.safe_load((CHART_DIR / "values-kind.yaml").read_text())
    helm = helm_python.Config(namespace=namespace)
    try:
        # Waits for the post-install migrations hook; the pods wait for the schema.
        helm.install(str(CHART_DIR), RELEASE, values, namespace=namespace, timeout=600)
        release = Docpipe(namespace)
        try:
            release.wait_for_rollouts()
        except TimeoutError:
            save_diagnostics(namespace, ARTIFACTS / "install")
            raise
        yield release
        release.close()
    finally:
        if os.environ.get("DOCPIPE_K8S_KEEP") != "1":
            helm.uninstall(RELEASE, ignore_not_found=True, timeout=300)
        helm.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if report.failed and call.when in ("setup", "call") and "docpipe" in item.funcargs:
        release: Docpipe = item.funcargs["docpipe"]  # type: ignore[assignment]
        folder = ARTIFACTS / re.sub(r"[^\w.-]+", "_", item.name)
        save_diagnostics(release.namespace, folder)
        report.sections.append(("k8s diagnostics", f"saved to {folder}"))
    return report


@pytest.fixture(autouse=True)
def _release_is_healthy(request: pytest.FixtureRequest) -> None:
    """Every test starts from a fully rolled-out release (an earlier test may have killed pods)."""
    if "docpipe" in request.fixturenames:
        docpipe: Docpipe = request.getfixturevalue("docpipe")
        docpipe.wait_for_rollouts(timeout_s=300)


def pytest_report_header() -> list[str]:
    return [f"k8s-tests: chart {Path(CHART_DIR).relative_to(REPO)}, release {RELEASE!r}"]
