"""Render the docpipe chart with Helm's own engine (helm-python-sdk, Helm v4) and look at the
objects it produces.

``render()`` goes through the SDK's native call because its Python ``Chart.render`` does not
expose the capabilities a real install discovers (API versions, Kubernetes version); the
native options ``api_versions`` and ``kube_version`` are Helm's ``--api-versions`` and
``--kube-version``. ``test_capabilities_reach_the_templates`` fails loudly if that changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import helm_python
import yaml
from helm_python import _native

CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "docpipe"
KUBE_VERSION = "1.33"  # the kind node image the k8s-tests use (Makefile KIND_NODE_IMAGE)
MONITORING_API = "monitoring.coreos.com/v1"
KEDA_API = "keda.sh/v1alpha1"
RELEASE = "docpipe"
NAMESPACE = "docpipe"

Obj = dict[str, Any]

# libyaml's parser under the safe loader's constructors: the same objects as yaml.safe_load,
# parsed ten times faster (a render is ~100 KB of YAML; pure Python took 0.6 s of each).
SafeLoader = yaml.CSafeLoader


@cache
def chart(path: Path = CHART_DIR) -> helm_python.Chart:
    return helm_python.Chart.load(str(path))


def values_file(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART_DIR / name).read_text())
    return loaded


def render_files(
    values: dict[str, Any] | None = None,
    *,
    api_versions: Iterable[str] = (),
    chart_dir: Path = CHART_DIR,
    release: str = RELEASE,
) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` with these capabilities would."""
    opts = {
        "name": release,
        "namespace": NAMESPACE,
        "is_install": True,
        "kube_version": f"v{KUBE_VERSION}.0",
        "api_versions": list(api_versions),
    }
    loaded = chart(chart_dir)
    rendered = _native.call_string(
        "helm_render", loaded._raw(), json.dumps(values or {}), json.dumps(opts)
    )
    files: dict[str, str] = json.loads(rendered)
    return files


def render(
    values: dict[str, Any] | None = None,
    *,
    api_versions: Iterable[str] = (),
    chart_dir: Path = CHART_DIR,
    release: str = RELEASE,
) -> list[Obj]:
    """Every Kubernetes object the chart renders (NOTES.txt aside)."""
    files = render_files(values, api_versions=api_versions, chart_dir=chart_dir, release=release)
    return [
        doc
        for path, text in sorted(files.items())
        if path.endswith((".yaml", ".yml"))
        for doc in yaml.load_all(text, Loader=SafeLoader)
        if doc
    ]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    """The one object of ``kind`` called ``name`` (release "docpipe": names are docpipe-*)."""
    matches = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} found"
    return matches[0]


def pod_specs(objects: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, pod spec) of every Deployment, StatefulSet and Job."""
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield obj, obj["spec"]["template"]["spec"]


def env_of(container: Obj) -> dict[str, Any]:
    """name -> value (or valueFrom) of a container's explicit env."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# The value sets the chart is rendered with: what a user of each setup would pass.
EXTERNAL_SECRET = {
    "postgresql": {"enabled": False},
    "redis": {"enabled": False},
    "secrets": {"existingSecret": "docpipe-credentials"},
    "config": {"llmBaseUrl": "https://llm.example.com/v1"},
    "migrations": {"useHelmHooks": False},
}
EXTERNAL_URLS = {
    "postgresql": {"enabled": False},
    "redis": {"enabled": False},
    "secrets": {
        "databaseUrl": "postgresql://docpipe:s3cret@db.example.com:5432/docpipe",
        "redisUrl": "redis://:s3cret@redis.example.com:6379/0",
        "llmApiKey": "sk-test",
    },
    "config": {
        "modelPrices": {"gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}},
        "extraEnv": [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel:4318"}],
    },
    "image": {"registry": "ghcr.io/acme/docpipe", "tag": "1.2.3", "pullSecrets": ["ghcr"]},
}
SCALED = {
    "api": {"hpa": {"enabled": True}},
    "workers": {
        "interactive": {"keda": {"enabled": True}},
        "batch": {
            "keda": {"enabled": True},
            "taskSoftTimeLimitSeconds": 300,
            "taskTimeLimitSeconds": 360,
        },
    },
    "config": {"brokerVisibilityTimeoutSeconds": 7200},
    "monitoring": {"labels": {"release": "kube-prometheus-stack"}},
    "networkPolicy": {
        "apiIngressFrom": [{"namespaceSelector": {"matchLabels": {"team": "web"}}}],
        "metricsIngressFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
    },
}


# A user's pipeline file, as the `pipelines` value carries it.
INVOICE_PIPELINE = """\
name: invoice_check
version: 1
defaults: {model: gpt-4o-mini}
steps:
  - name: total
    kind: ask
    prompt: "{{ document }}"
    output_schema: {type: object, required: [total], properties: {total: {type: number}}}
"""
WITH_PIPELINES = {
    "pipelines": {"invoice.yaml": INVOICE_PIPELINE},
    "config": {"pipelineModules": ["acme_flows", "acme_flows.claims:CLAIMS"]},
}


# The batch lane as threads, as values.yaml's comment suggests: 200 slots a pod, KEDA adding
# a pod per 200 steps waiting, an admission window that lets runs wait for the pods.
THREADS_LANE = {
    "workers": {
        "batch": {
            "pool": "threads",
            "concurrency": 200,
            "resources": {
                "requests": {"cpu": "1000m", "memory": "512Mi"},
                "limits": {"memory": "1Gi"},
            },
            "keda": {"enabled": True, "maxReplicas": 10, "listLength": 200},
        }
    },
    "config": {"batchAdmissionWindow": 2000},
}


def value_sets() -> dict[str, tuple[dict[str, Any], tuple[str, ...]]]:
    """name -> (values, API versions the cluster serves)."""
    return {
        "defaults": ({}, ()),
        "kind": (values_file("values-kind.yaml"), ()),
        "external-secret": (EXTERNAL_SECRET, ()),
        "external-urls": (EXTERNAL_URLS, ()),
        "keda-hpa-monitoring": (SCALED, (MONITORING_API, KEDA_API)),
        "pipelines": (WITH_PIPELINES, ()),
        "threads-lane": (THREADS_LANE, (KEDA_API,)),
    }
