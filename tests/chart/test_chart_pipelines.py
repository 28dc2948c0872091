"""The `pipelines` value: files in a ConfigMap, mounted where pipelines are loaded, rolled
out by a checksum, and what Helm can refuse while rendering refused there."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from docpipe.pipelines.files import load_pipeline_file
from tests.chart.helm import INVOICE_PIPELINE, WITH_PIPELINES, named, pod_specs, render

LOADERS = {"docpipe-api", "docpipe-worker-interactive", "docpipe-worker-batch", "docpipe-beat"}


def mounts(pod: dict[str, Any]) -> dict[str, str]:
    return {
        m["name"]: m["mountPath"]
        for container in pod["containers"]
        for m in container.get("volumeMounts", [])
    }


def test_pipeline_files_are_mounted_where_pipelines_are_loaded() -> None:
    objects = render(WITH_PIPELINES)
    config = named(objects, "ConfigMap", "docpipe-pipelines")
    assert config["data"] == {"invoice.yaml": INVOICE_PIPELINE}
    # What the chart ships loads as docpipe loads it.
    assert load_pipeline_file(config["data"]["invoice.yaml"], "invoice.yaml").key == (
        "invoice_check:v1"
    )
    settings = named(objects, "ConfigMap", "docpipe")["data"]
    assert settings["DOCPIPE_PIPELINES_DIR"] == "/etc/docpipe/pipelines"
    assert settings["DOCPIPE_PIPELINE_MODULES"] == "acme_flows,acme_flows.claims:CLAIMS"
    loaders = {}
    for workload, pod in pod_specs(objects):
        name = workload["metadata"]["name"]
        if name in LOADERS or workload["kind"] == "Job":
            loaders[name] = mounts(pod).get("pipelines")
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert volumes["pipelines"]["configMap"]["name"] == "docpipe-pipelines"
    assert set(loaders) >= LOADERS and len(loaders) == len(LOADERS) + 1  # + the migrations Job
    assert set(loaders.values()) == {"/etc/docpipe/pipelines"}


def test_without_pipeline_files_nothing_is_mounted() -> None:
    objects = render({})
    assert not [o for o in objects if o["metadata"]["name"] == "docpipe-pipelines"]
    assert "DOCPIPE_PIPELINES_DIR" not in named(objects, "ConfigMap", "docpipe")["data"]
    for _, pod in pod_specs(objects):
        assert "pipelines" not in mounts(pod)


def checksum(values: dict[str, Any], deployment: str) -> str:
    annotations = named(render(values), "Deployment", deployment)["spec"]["template"]["metadata"]
    return str(annotations["annotations"]["checksum/pipelines"])


def test_a_changed_pipeline_file_rolls_the_pods_that_load_it() -> None:
    changed = {"pipelines": {"invoice.yaml": INVOICE_PIPELINE.replace("version: 1", "version: 2")}}
    for deployment in LOADERS:
        assert checksum(WITH_PIPELINES, deployment) != checksum(changed, deployment)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"broken.yaml": "name: x\nsteps: [\n"}, "pipelines.broken.yaml: not valid YAML"),
        (
            {"nosteps.yaml": "name: x\nversion: 1\n"},
            "pipelines.nosteps.yaml: a pipeline file needs steps",
        ),
        (
            {"flat.yaml": "name: x\nversion: 1\nsteps: ask\n"},
            "pipelines.flat.yaml: steps must be a list",
        ),
    ],
)
def test_a_pipeline_file_helm_can_see_is_broken_is_refused_at_render_time(
    files: dict[str, str], message: str
) -> None:
    with pytest.raises(helm_python.HelmError, match=message):
        render({"pipelines": files})


def test_a_file_name_that_is_not_yaml_is_refused_by_the_values_schema() -> None:
    with pytest.raises(helm_python.HelmError, match=r"invalid propertyName '\.\./etc/passwd'"):
        render({"pipelines": {"../etc/passwd": INVOICE_PIPELINE}})
