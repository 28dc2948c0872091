"""Every name the k8s-tests look up in the release exists in the chart rendered the way they
install it (values-kind.yaml, their release name): pod label selectors, Deployments, the
Services they port-forward to and the container ports behind them, ConfigMap and Secret keys,
the database login. The names come from k8s-tests/release_names.py, the module the suite itself
uses, so a rename in the chart fails here rather than first on a cluster."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.chart.helm import Obj, env_of, named, of_kind, render, values_file

K8S_TESTS = Path(__file__).resolve().parents[2] / "k8s-tests"
POD_OWNERS = ("Deployment", "StatefulSet", "Job")


def load_release_names() -> ModuleType:
    """k8s-tests/release_names.py, loaded by path: k8s-tests/ is no package (pytest puts it on
    sys.path only when it runs that suite)."""
    spec = importlib.util.spec_from_file_location("release_names", K8S_TESTS / "release_names.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


names = load_release_names()


@pytest.fixture(scope="module")
def release() -> list[Obj]:
    return render(values_file("values-kind.yaml"), release=names.RELEASE)


def selects(selector: str | dict[str, str], labels: dict[str, str]) -> bool:
    """Whether an equality-based label selector ("k=v,k=v" or a matchLabels map) selects."""
    if isinstance(selector, str):
        pairs = [term.split("=") for term in selector.split(",")]
        assert all(len(pair) == 2 and "!" not in pair[0] for pair in pairs), selector
        selector = dict(pairs)
    return all(labels.get(key) == value for key, value in selector.items())


def pod_owners(objects: list[Obj], selector: str | dict[str, str]) -> list[Obj]:
    """The Deployments, StatefulSets and Jobs whose pods the selector lists."""
    owners = [o for o in objects if o["kind"] in POD_OWNERS]
    return [o for o in owners if selects(selector, o["spec"]["template"]["metadata"]["labels"])]


def test_pod_selectors_find_exactly_the_workloads_the_suite_means(release: list[Obj]) -> None:
    for component in names.COMPONENTS:
        owners = pod_owners(release, names.pod_selector(component))
        assert owners, f"no pods for the suite's selector {names.pod_selector(component)!r}"
        assert {o["kind"] for o in owners} <= {"Deployment", "StatefulSet"}, component
        assert all(o["spec"].get("replicas", 1) >= 1 for o in owners), component
    (beat,) = pod_owners(release, names.pod_selector(names.BEAT))
    assert beat["metadata"]["name"] == names.BEAT_DEPLOYMENT, "the suite reads it by name"
    for pool in names.POOLS:
        (worker,) = pod_owners(release, names.pod_selector(names.WORKER, pool))
        assert worker["kind"] == "Deployment"
        assert worker["metadata"]["name"] == names.worker_deployment(pool), (
            "the suite restarts this Deployment by name"
        )
    assert not pod_owners(release, names.pod_selector(names.WORKER, "no-such-pool"))


def test_every_service_the_suite_forwards_to_reaches_a_container_port(
    release: list[Obj],
) -> None:
    for service_name, port in names.SERVICES:
        service = named(release, "Service", service_name)
        (service_port,) = [p for p in service["spec"]["ports"] if p["port"] == port]
        target = service_port["targetPort"]
        owners = pod_owners(release, service["spec"]["selector"])
        assert owners, f"Service {service_name} selects no pods"
        for owner in owners:
            ports = [
                p
                for c in owner["spec"]["template"]["spec"]["containers"]
                for p in c.get("ports", [])
            ]
            key = "name" if isinstance(target, str) else "containerPort"
            assert target in [p.get(key) for p in ports], (
                f"{owner['metadata']['name']} has no container port {target!r} "
                f"for Service {service_name}:{port}"
            )


def test_the_configmap_and_secret_keys_the_suite_reads_exist(release: list[Obj]) -> None:
    assert names.REAPER_INTERVAL_KEY in named(release, "ConfigMap", names.CONFIGMAP)["data"]
    assert names.POSTGRES_PASSWORD_KEY in named(release, "Secret", names.SECRET)["data"]


def test_the_suite_logs_in_to_the_bundled_postgresql_as_its_user(release: list[Obj]) -> None:
    service = named(release, "Service", names.POSTGRESQL.name)
    (postgres,) = pod_owners(release, service["spec"]["selector"])
    env = env_of(postgres["spec"]["template"]["spec"]["containers"][0])
    assert (env["POSTGRES_USER"], env["POSTGRES_DB"]) == (
        names.DATABASE_USER,
        names.DATABASE_NAME,
    )


def spelled_out_lookups(path: Path, keys: set[str]) -> list[str]:
    """Places in a suite module that name a chart object, label or data key themselves, or
    pass a literal component or pool to a pod lookup."""
    fragments = (f"{names.RELEASE}-", "app.kubernetes.io/", "docpipe.io/")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if id(node) not in docstrings and (text in keys or any(f in text for f in fragments)):
                found.append(f"{path.name}:{node.lineno} {text!r}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pods", "running_pods")
            and any(isinstance(arg, ast.Constant) for arg in node.args)
        ):
            found.append(f"{path.name}:{node.lineno} {node.func.attr}() with a literal")
    return found


def test_the_suite_spells_no_chart_name_outside_release_names(release: list[Obj]) -> None:
    """Otherwise a name could change in the chart and in one test, and this file would not
    see the lookups that still use the old one."""
    data = [o["data"] for kind in ("ConfigMap", "Secret") for o in of_kind(release, kind)]
    keys = {key for datum in data for key in datum}
    modules = [K8S_TESTS / "kube.py", *sorted(K8S_TESTS.glob("test_*.py"))]
    found = [place for path in modules for place in spelled_out_lookups(path, keys)]
    assert found == [], "take these from k8s-tests/release_names.py"
