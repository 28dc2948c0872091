"""What every rendering of the chart must guarantee about its workloads, for each value set:
a single beat, grace periods that outlast the longest step, exec-form entry points that match
docpipe_dev.processes, probes that start no Python, resources and a restricted security context."""

from __future__ import annotations

import math
from typing import Any

import helm_python
import jmespath
import pytest

from docpipe_dev.processes import WORKER_QUEUES, api_argv, beat_argv, fake_llm_argv, worker_argv
from tests.chart.helm import (
    Obj,
    env_of,
    named,
    of_kind,
    pod_specs,
    render,
    value_sets,
)

VALUE_SETS = value_sets()
SHELLS = {"sh", "/bin/sh", "bash", "/bin/bash", "dash"}


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> list[Obj]:
    values, api_versions = VALUE_SETS[request.param]
    return render(values, api_versions=api_versions)


def docpipe_workloads(objects: list[Obj]) -> list[Obj]:
    """Workloads running docpipe's own images (not the bundled PostgreSQL and Redis)."""
    return [
        o
        for o in objects
        if o["kind"] in ("Deployment", "Job")
        and o["metadata"]["labels"]["app.kubernetes.io/component"] not in ("redis",)
    ]


def without_interpreter(argv: list[str]) -> list[str]:
    """``python -m celery ...`` as the library starts it -> ``celery ...`` as the image does."""
    assert argv[1] == "-m"
    return argv[2:]


def test_beat_is_a_singleton_replaced_with_recreate(rendered: list[Obj]) -> None:
    beat = named(rendered, "Deployment", "docpipe-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert not [
        o
        for o in rendered
        if o["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")
        and o["spec"]["scaleTargetRef"]["name"] == beat["metadata"]["name"]
    ]


def test_worker_grace_period_outlasts_the_hard_time_limit_and_the_soft_shutdown(
    rendered: list[Obj],
) -> None:
    workers = [
        d for d in of_kind(rendered, "Deployment") if "docpipe.io/pool" in d["metadata"]["labels"]
    ]
    assert {d["metadata"]["labels"]["docpipe.io/pool"] for d in workers} == {"interactive", "batch"}
    configmap = named(rendered, "ConfigMap", "docpipe")["data"]
    for deployment in workers:
        spec = deployment["spec"]["template"]["spec"]
        env = {**configmap, **env_of(spec["containers"][0])}
        soft = float(env["DOCPIPE_TASK_SOFT_TIME_LIMIT_S"])
        hard = float(env["DOCPIPE_TASK_TIME_LIMIT_S"])
        shutdown = float(env["DOCPIPE_WORKER_SOFT_SHUTDOWN_S"])
        grace = spec["terminationGracePeriodSeconds"]
        assert float(configmap["DOCPIPE_LLM_TIMEOUT_S"]) < soft < hard
        assert hard < float(configmap["DOCPIPE_BROKER_VISIBILITY_TIMEOUT_S"])
        assert grace > hard + shutdown, deployment["metadata"]["name"]
        assert grace == math.ceil(hard + shutdown + 15)


def test_entry_points_are_exec_form_and_match_the_library_argv(rendered: list[Obj]) -> None:
    for workload, spec in pod_specs(rendered):
        for container in spec.get("initContainers", []) + spec["containers"]:
            command = container.get("command") or []
            assert command, f"{workload['metadata']['name']}/{container['name']}: set command"
            assert command[0] not in SHELLS, f"{container['name']} runs through a shell"
    for deployment in of_kind(rendered, "Deployment"):
        labels = deployment["metadata"]["labels"]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        argv = container["command"] + container.get("args", [])
        component = labels["app.kubernetes.io/component"]
        if component == "worker":
            lane = labels["docpipe.io/pool"]
            args = container["args"]
            concurrency = int(args[args.index("--concurrency") + 1])
            expected = without_interpreter(worker_argv(lane, concurrency=concurrency))
            assert args[args.index("--queues") + 1] == WORKER_QUEUES[lane]
            assert args[args.index("--prefetch-multiplier") + 1] == "1"
            i = argv.index("--prefetch-multiplier")
            assert argv[:i] + argv[i + 2 :] == expected
        elif component == "beat":
            assert argv == without_interpreter(beat_argv())
        elif component == "api":
            port = int(container["ports"][0]["containerPort"])
            expected = without_interpreter(api_argv(host="0.0.0.0", port=port))
            assert argv[: len(expected)] == expected
        elif component == "fake-llm":
            args = container["args"]
            expected = fake_llm_argv(
                host="0.0.0.0", port=int(args[3]), latency_ms=args[5], rpm=int(args[7])
            )
            assert argv == ["python", *expected[1:]]


def test_every_long_running_container_has_probes_resources_and_runs_as_non_root(
    rendered: list[Obj],
) -> None:
    for workload, spec in pod_specs(rendered):
        name = workload["metadata"]["name"]
        pod_security = spec["securityContext"]
        assert pod_security["runAsNonRoot"] is True, name
        assert pod_security["runAsUser"] != 0, name
        assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name
        for container in spec.get("initContainers", []) + spec["containers"]:
            where = f"{name}/{container['name']}"
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["capabilities"] == {"drop": ["ALL"]}, where
            assert container["resources"]["requests"]["memory"], where
            assert container["resources"]["limits"]["memory"], where
        if workload["kind"] == "Job":
            continue  # a one-shot: no probes
        for container in spec["containers"]:
            where = f"{name}/{container['name']}"
            assert "livenessProbe" in container, where
            assert "readinessProbe" in container, where


def test_worker_and_beat_probes_read_the_heartbeat_file_without_python(rendered: list[Obj]) -> None:
    for deployment in of_kind(rendered, "Deployment"):
        component = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        if component not in ("worker", "beat"):
            continue
        spec = deployment["spec"]["template"]["spec"]
        container = spec["containers"][0]
        liveness_file = env_of(container)["DOCPIPE_LIVENESS_FILE"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volume = mounts[liveness_file.rsplit("/", 1)[0]]
        assert "emptyDir" in next(v for v in spec["volumes"] if v["name"] == volume)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            command = container[probe]["exec"]["command"]
            assert command[:2] == ["/bin/sh", "-c"]
            assert "python" not in " ".join(command)
            assert "$DOCPIPE_LIVENESS_FILE" in command[2]


def test_api_probes_ask_the_probes_process_the_api_starts(rendered: list[Obj]) -> None:
    """The kubelet asks the port that DOCPIPE_PROBE_PORT gives the API's probes' process
    (docpipe_api.probe_server), never the API's own port, where tenants' requests are."""
    for deployment in of_kind(rendered, "Deployment"):
        if deployment["metadata"]["labels"]["app.kubernetes.io/component"] != "api":
            continue
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert int(env_of(container)["DOCPIPE_PROBE_PORT"]) == ports["probes"] != ports["http"]
        for probe, path in (
            ("startupProbe", "/healthz"),
            ("livenessProbe", "/healthz"),
            ("readinessProbe", "/readyz"),
        ):
            assert container[probe]["httpGet"] == {"path": path, "port": "probes"}


def test_the_api_network_policy_lets_the_kubelet_reach_the_probes(rendered: list[Obj]) -> None:
    """Every port the API's probes ask is one its NetworkPolicy admits; the kubelet asks
    from its node's address, which no selector names: any peer unless narrowed."""
    policies = [
        p
        for p in of_kind(rendered, "NetworkPolicy")
        if p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "api"
    ]
    if not policies:
        return  # networkPolicy.enabled is off in this value set
    admitted = {
        port["port"]: rule.get("from")
        for rule in policies[0]["spec"]["ingress"]
        for port in rule["ports"]
    }
    api = named(rendered, "Deployment", "docpipe-api")
    container = api["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        port = container[probe]["httpGet"]["port"]
        assert port in admitted, f"the NetworkPolicy refuses the kubelet's {probe} ({port})"
        assert admitted[port] is None, "any peer: the kubelet asks from its node's address"


def test_the_probes_port_can_be_narrowed_to_the_nodes() -> None:
    nodes = [{"ipBlock": {"cidr": "10.0.0.0/16"}}]
    policy = named(
        render({"networkPolicy": {"probeIngressFrom": nodes}}), "NetworkPolicy", "docpipe-api"
    )
    rules = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == "probes"]
    assert rules == [{"ports": [{"port": "probes", "protocol": "TCP"}], "from": nodes}]


def test_pods_wait_for_the_schema_and_roll_when_config_changes(rendered: list[Obj]) -> None:
    for deployment in docpipe_workloads(rendered):
        if deployment["kind"] != "Deployment":
            continue
        component = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        template = deployment["spec"]["template"]
        if component in ("api", "worker", "beat"):
            init = template["spec"]["initContainers"]
            assert [c["name"] for c in init] == ["wait-for-schema"]
            assert init[0]["image"] == template["spec"]["containers"][0]["image"]
            assert "checksum/config" in template["metadata"]["annotations"]


def test_secrets_never_land_in_the_configmap(rendered: list[Obj]) -> None:
    data = named(rendered, "ConfigMap", "docpipe")["data"]
    assert not {"DOCPIPE_DATABASE_URL", "DOCPIPE_REDIS_URL", "DOCPIPE_LLM_API_KEY"} & set(data)
    assert all("s3cret" not in value for value in data.values())


def test_every_component_is_behind_a_network_policy(rendered: list[Obj]) -> None:
    policies = of_kind(rendered, "NetworkPolicy")
    covered = {
        p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in policies
    }
    components = {
        o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        for o in rendered
        if o["kind"] in ("Deployment", "StatefulSet")
    }
    assert components <= covered


def test_config_change_changes_the_pods_checksum() -> None:
    def checksum(values: dict[str, Any]) -> str:
        external = {"postgresql": {"enabled": False}, "redis": {"enabled": False}}
        objects = render({**values, **external, "secrets": {"existingSecret": "x"}})
        worker = named(objects, "Deployment", "docpipe-worker-batch")
        return str(worker["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum({"config": {"maxStepAttempts": 7}})


def test_existing_secret_is_used_and_no_secret_is_created() -> None:
    values, _ = VALUE_SETS["external-secret"]
    objects = render(values)
    assert of_kind(objects, "Secret") == []
    worker = named(objects, "Deployment", "docpipe-worker-interactive")
    ref = env_of(worker["spec"]["template"]["spec"]["containers"][0])["DOCPIPE_DATABASE_URL"]
    assert ref == {"secretKeyRef": {"name": "docpipe-credentials", "key": "DOCPIPE_DATABASE_URL"}}
    # Without hooks the Job is named after the revision (Job templates are immutable).
    job = of_kind(objects, "Job")[0]
    assert job["metadata"]["name"] == "docpipe-migrate-1"
    assert "annotations" not in job["metadata"]


def test_migrations_run_as_a_post_install_hook_by_default() -> None:
    job = named(render(), "Job", "docpipe-migrate")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["docpipe", "migrate"]


def test_bundled_services_get_generated_credentials_in_one_secret() -> None:
    secret = named(render(), "Secret", "docpipe")
    assert set(secret["data"]) == {
        "DOCPIPE_DATABASE_URL",
        "DOCPIPE_REDIS_URL",
        "DOCPIPE_LLM_API_KEY",
        "DOCPIPE_SECRETS_KEY",
        "postgres-password",
        "redis-password",
        "redis-auth.conf",
    }


def test_kind_values_point_the_workers_at_the_fake_provider() -> None:
    values, _ = VALUE_SETS["kind"]
    objects = render(values)
    data = named(objects, "ConfigMap", "docpipe")["data"]
    assert data["DOCPIPE_LLM_BASE_URL"] == "http://docpipe-fake-llm:8100/v1"
    assert named(objects, "Service", "docpipe-fake-llm")
    containers = "[?kind=='Deployment'].spec.template.spec.containers[]"
    ours = jmespath.search(f"{containers} | [?starts_with(image, 'localhost/')]", objects)
    assert len(ours) == 5  # api, two worker pools, beat, fake provider
    assert {(c["image"].rsplit(":", 1)[1], c["imagePullPolicy"]) for c in ours} == {
        ("dev", "Never")
    }


def test_a_pool_of_threads_is_chosen_per_worker_deployment() -> None:
    rendered = render({"workers": {"batch": {"pool": "threads"}}})
    pools = {
        d["metadata"]["labels"]["docpipe.io/pool"]: env_of(
            d["spec"]["template"]["spec"]["containers"][0]
        )
        for d in of_kind(rendered, "Deployment")
        if "docpipe.io/pool" in d["metadata"]["labels"]
    }
    assert {lane: env["DOCPIPE_WORKER_POOL"] for lane, env in pools.items()} == {
        "interactive": "prefork",
        "batch": "threads",
    }
    with pytest.raises(helm_python.HelmError, match="pool"):
        render({"workers": {"batch": {"pool": "gevent"}}})
