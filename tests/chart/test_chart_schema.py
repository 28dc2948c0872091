"""values.schema.json is strict and described: every shipped values file passes it, unknown
keys are refused at every level, and every property says what it is for. helm lint agrees."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import helm_python
import pytest

from docpipe_dev.reference import chart as reference_chart
from tests.chart.helm import CHART_DIR, chart, value_sets, values_file

SCHEMA: dict[str, Any] = json.loads((CHART_DIR / "values.schema.json").read_text())


def objects_of(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            yield schema
        for value in schema.values():
            if isinstance(value, dict):
                yield from objects_of(value)
            elif isinstance(value, list):
                for item in value:
                    yield from objects_of(item)


@pytest.mark.parametrize("name", ["values.yaml", "values-kind.yaml"])
def test_shipped_values_files_pass_the_schema(name: str) -> None:
    chart().validate_schema(values_file(name))


@pytest.mark.parametrize("name", sorted(value_sets()))
def test_the_tested_value_sets_pass_the_schema(name: str) -> None:
    values, _ = value_sets()[name]
    chart().validate_schema(values)


def test_every_described_object_refuses_unknown_keys() -> None:
    for obj in objects_of(SCHEMA):
        assert obj.get("additionalProperties") is False, sorted(obj["properties"])


def test_every_property_is_described() -> None:
    missing = reference_chart.undocumented()  # the same walk the docs' values page makes
    assert missing == [], "\n".join(missing)


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 3},
        {"api": {"replica": 3}},
        {"workers": {"batch": {"concurency": 8}}},
        {"workers": {"gpu": {"enabled": True}}},
        {"config": {"llmTimeout": 5}},
        {"monitoring": {"serviceMonitor": {"scrapeTimeout": "10s"}}},
        {"postgresql": {"persistence": {"sizeGi": 2}}},
    ],
    ids=str,
)
def test_schema_refuses_unknown_keys(values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError, match="additional properties"):
        chart().validate_schema(values)


@pytest.mark.parametrize(
    "values",
    [
        {"workers": {"batch": {"queues": ["celery"]}}},
        {"workers": {"interactive": {"concurrency": 0}}},
        {"config": {"llmTimeoutSeconds": 0}},
        {"config": {"llmTimeoutSeconds": "20"}},
        {"image": {"pullPolicy": "Sometimes"}},
        {"fakeLlm": {"latencyMs": "fast"}},
    ],
    ids=str,
)
def test_schema_refuses_wrong_types_and_ranges(values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        chart().validate_schema(values)


@pytest.mark.parametrize("name", sorted(value_sets()))
def test_helm_lint_finds_no_warning(name: str) -> None:
    values, _ = value_sets()[name]
    if name == "keda-hpa-monitoring":
        # lint takes no API versions, and KEDA's ScaledObjects refuse to render without
        # theirs: lint the rest of the set (the ScaledObjects are validated elsewhere).
        values = copy.deepcopy(values)
        for pool in values["workers"].values():
            pool["keda"]["enabled"] = False
    report = helm_python.lint(str(CHART_DIR), values, strict=True, kube_version="v1.33.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == [] and report["errors"] == []
