"""Monitoring and autoscaling objects: rendered only where the cluster serves their APIs,
pointed at the right ports and queues, and fed from the chart's dashboards/ and rules/ files
whether or not those exist yet."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.chart.helm import (
    CHART_DIR,
    MONITORING_API,
    Obj,
    named,
    of_kind,
    render,
    value_sets,
)

MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


@pytest.fixture
def chart_with_dashboards_and_rules(tmp_path: Path) -> Path:
    """A copy of the chart with one dashboard and one rule file of its own."""
    copy = tmp_path / "docpipe"
    shutil.copytree(CHART_DIR, copy)
    (copy / "dashboards").mkdir(exist_ok=True)
    (copy / "dashboards" / "test_overview.json").write_text(json.dumps({"title": "Test"}))
    (copy / "rules").mkdir(exist_ok=True)
    (copy / "rules" / "test.yaml").write_text(
        "groups:\n- name: test\n  rules:\n  - alert: TestAlert\n    expr: up == 0\n"
        "    annotations:\n      summary: '{{ $labels.instance }} is down'\n"
    )
    return copy


def test_capabilities_reach_the_templates() -> None:
    without = {o["kind"] for o in render()}
    with_api = {o["kind"] for o in render(api_versions=[MONITORING_API])}
    assert not without & MONITORING_KINDS
    assert {"ServiceMonitor", "PodMonitor"} <= with_api


def test_monitors_scrape_the_ports_named_metrics() -> None:
    values, api_versions = value_sets()["keda-hpa-monitoring"]
    objects = render(values, api_versions=api_versions)
    service_monitor = named(objects, "ServiceMonitor", "docpipe-api")
    assert service_monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert [e["port"] for e in service_monitor["spec"]["endpoints"]] == ["metrics"]
    # The ServiceMonitor selects the API's metrics Service, never the public one.
    selected = [
        service
        for service in of_kind(objects, "Service")
        if service_monitor["spec"]["selector"]["matchLabels"].items()
        <= service["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == ["docpipe-api-metrics"]
    assert selected[0]["spec"]["ports"] == [
        {"name": "metrics", "port": 9808, "targetPort": "metrics", "protocol": "TCP"}
    ]
    public = named(objects, "Service", "docpipe-api")
    assert [p["name"] for p in public["spec"]["ports"]] == ["http"]
    pod_monitor = of_kind(objects, "PodMonitor")[0]
    assert [e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    scraped = set(pod_monitor["spec"]["selector"]["matchExpressions"][0]["values"])
    assert scraped == {"worker", "beat"}
    for deployment in of_kind(objects, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if labels["app.kubernetes.io/component"] in scraped | {"api"}:
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            assert {"name": "metrics", "containerPort": 9808, "protocol": "TCP"} in container[
                "ports"
            ]
            assert {"name": "DOCPIPE_METRICS_PORT", "value": "9808"} in container["env"]


def test_dashboards_and_rules_come_from_the_chart_files(
    chart_with_dashboards_and_rules: Path,
) -> None:
    objects = render(api_versions=[MONITORING_API], chart_dir=chart_with_dashboards_and_rules)
    dashboard = named(objects, "ConfigMap", "docpipe-dashboard-test-overview")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["test_overview.json"]) == {"title": "Test"}
    rule = named(objects, "PrometheusRule", "docpipe")
    groups = {g["name"]: g for g in rule["spec"]["groups"]}
    assert "test" in groups
    # Prometheus' own template syntax passes through Helm untouched.
    annotation = groups["test"]["rules"][0]["annotations"]["summary"]
    assert annotation == "{{ $labels.instance }} is down"


def test_without_the_monitoring_api_dashboards_still_render_but_no_crd_objects(
    chart_with_dashboards_and_rules: Path,
) -> None:
    objects = render(chart_dir=chart_with_dashboards_and_rules)
    assert not {o["kind"] for o in objects} & MONITORING_KINDS
    assert named(objects, "ConfigMap", "docpipe-dashboard-test-overview")


def test_keda_scales_each_pool_on_its_lane_queue_and_owns_its_replicas() -> None:
    values, api_versions = value_sets()["keda-hpa-monitoring"]
    objects = render(values, api_versions=api_versions)
    scaled = {o["spec"]["scaleTargetRef"]["name"]: o for o in of_kind(objects, "ScaledObject")}
    assert set(scaled) == {"docpipe-worker-interactive", "docpipe-worker-batch"}
    for name, lane_queue in (
        ("docpipe-worker-interactive", "llm_interactive"),
        ("docpipe-worker-batch", "llm_batch"),
    ):
        trigger = scaled[name]["spec"]["triggers"][0]
        assert trigger["type"] == "redis"
        assert trigger["metadata"]["listName"] == lane_queue
        assert trigger["metadata"]["address"] == "docpipe-redis:6379"
        assert trigger["authenticationRef"]["name"] == "docpipe-keda-redis"
        assert "replicas" not in named(objects, "Deployment", name)["spec"]
    auth = named(objects, "TriggerAuthentication", "docpipe-keda-redis")
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "password", "name": "docpipe", "key": "redis-password"}
    ]
    redis_policy = named(objects, "NetworkPolicy", "docpipe-redis")
    peers = redis_policy["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}} in peers


def test_hpa_owns_the_api_replicas() -> None:
    values, api_versions = value_sets()["keda-hpa-monitoring"]
    objects = render(values, api_versions=api_versions)
    hpa = of_kind(objects, "HorizontalPodAutoscaler")[0]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "docpipe-api"
    assert "replicas" not in named(objects, "Deployment", "docpipe-api")["spec"]


def metrics_rules(objects: list[Obj]) -> dict[str, list[Obj]]:
    """Component -> the peers its NetworkPolicy admits on the port named metrics."""
    rules = {}
    for policy in of_kind(objects, "NetworkPolicy"):
        component = policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for rule in policy["spec"]["ingress"]:
            if [p["port"] for p in rule["ports"]] == ["metrics"]:
                rules[component] = rule["from"]
    return rules


def test_metrics_ports_admit_only_the_monitoring_namespace_by_default() -> None:
    objects = render()
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    assert metrics_rules(objects) == {c: [monitoring] for c in ("api", "worker", "beat")}
    # The API's public port stays open to clients, and is a rule of its own.
    api = named(objects, "NetworkPolicy", "docpipe-api")["spec"]["ingress"]
    assert api[0] == {"ports": [{"port": "http", "protocol": "TCP"}]}


def test_the_scrapers_can_be_narrowed_to_some_pods_or_replaced() -> None:
    prometheus = {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    narrowed = render(
        {"networkPolicy": {"metricsNamespace": "observability", "metricsPodSelector": prometheus}}
    )
    expected = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
            "podSelector": prometheus,
        }
    ]
    assert set(metrics_rules(narrowed)) == {"api", "worker", "beat"}
    assert all(peers == expected for peers in metrics_rules(narrowed).values())
    values, api_versions = value_sets()["keda-hpa-monitoring"]
    replaced = metrics_rules(render(values, api_versions=api_versions))
    peers = values["networkPolicy"]["metricsIngressFrom"]
    assert replaced == dict.fromkeys(("api", "worker", "beat"), peers)


def test_an_empty_metrics_namespace_is_refused() -> None:
    with pytest.raises(Exception, match="metricsNamespace"):
        render({"networkPolicy": {"metricsNamespace": ""}})
