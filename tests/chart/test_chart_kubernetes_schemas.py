"""Every object the chart renders, for every value set, is valid for Kubernetes 1.33 under
strict validation (unknown fields refused): core kinds against Kubernetes' OpenAPI schemas
(kubernetes-validate), the Prometheus Operator's and KEDA's kinds against their CRD models
(cloudcoil), where an unknown field is one that does not survive a round trip."""

from __future__ import annotations

from functools import cache
from typing import Any

import kubernetes_validate
import pytest
from pydantic import BaseModel

from tests.chart.helm import KUBE_VERSION, Obj, render, value_sets


@cache
def crd_models() -> dict[tuple[str, str], type[BaseModel]]:
    # Imported when a test runs, not when the suite is collected: the two model packages
    # take seconds to import, which make test-fast (that leaves the chart out) would pay.
    from cloudcoil.models.keda import v1alpha1 as keda
    from cloudcoil.models.prometheus_operator import v1 as monitoring

    return {
        ("monitoring.coreos.com/v1", "ServiceMonitor"): monitoring.ServiceMonitor,
        ("monitoring.coreos.com/v1", "PodMonitor"): monitoring.PodMonitor,
        ("monitoring.coreos.com/v1", "PrometheusRule"): monitoring.PrometheusRule,
        ("keda.sh/v1alpha1", "ScaledObject"): keda.ScaledObject,
        ("keda.sh/v1alpha1", "TriggerAuthentication"): keda.TriggerAuthentication,
    }


def validate_custom_resource(obj: Obj) -> None:
    model = crd_models()[(obj["apiVersion"], obj["kind"])]
    parsed = model.model_validate(obj)
    round_trip = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert normalised(round_trip) == normalised(obj), f"unknown or mistyped fields in {obj['kind']}"


def normalised(value: Any) -> Any:
    """Numbers as floats and no empty maps, so that a round trip compares equal."""
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if v != {}}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, bool | str) or value is None:
        return value
    return float(value)


@pytest.mark.parametrize("name", sorted(value_sets()))
def test_every_rendered_object_is_valid_kubernetes(name: str) -> None:
    values, api_versions = value_sets()[name]
    objects = render(values, api_versions=api_versions)
    assert objects
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in crd_models():
            validate_custom_resource(obj)
        else:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_strict_validation_refuses_an_unknown_field() -> None:
    deployment = next(o for o in render() if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


def test_crd_validation_refuses_an_unknown_field() -> None:
    values, api_versions = value_sets()["keda-hpa-monitoring"]
    scaled = next(
        o for o in render(values, api_versions=api_versions) if o["kind"] == "ScaledObject"
    )
    scaled["spec"]["triggers"][0]["listName"] = "llm_batch"
    with pytest.raises(AssertionError, match="unknown or mistyped"):
        validate_custom_resource(scaled)
