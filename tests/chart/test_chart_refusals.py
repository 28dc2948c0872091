"""Values the chart refuses to render, each with a message that names the values to fix."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from tests.chart.helm import KEDA_API, named, render


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"api": {"forwardedAllowIps": ["*"]}},
            'api.forwardedAllowIps ["*"] trusts every peer',
        ),
        (
            {"config": {"ocrMinDpi": 400}},
            "config.ocrMinDpi=400 must not exceed config.ocrRenderDpi=300",
        ),
        (
            {"config": {"pdfPageTimeoutSeconds": 60}},
            "config.pdfPageTimeoutSeconds=60 must be below config.taskSoftTimeLimitSeconds=60",
        ),
        (
            {"config": {"llmTimeoutSeconds": 60}},
            "config.llmTimeoutSeconds=60 must be below config.taskSoftTimeLimitSeconds=60",
        ),
        (
            {"config": {"taskSoftTimeLimitSeconds": 95}},
            "config.taskSoftTimeLimitSeconds=95 must be below config.taskTimeLimitSeconds=90",
        ),
        (
            {"config": {"brokerVisibilityTimeoutSeconds": 75}},
            "config.taskTimeLimitSeconds=90 must be below config.brokerVisibilityTimeoutSeconds=75",
        ),
        (
            {"config": {"taskTimeLimitSeconds": 70}},
            "config.taskTimeLimitSeconds=70 must exceed config.taskSoftTimeLimitSeconds + "
            "config.llmTimeoutSeconds=80",
        ),
        (
            {"workers": {"batch": {"taskTimeLimitSeconds": 50}}},
            "config.taskSoftTimeLimitSeconds=60 must be below "
            "workers.batch.taskTimeLimitSeconds=50",
        ),
        (
            {
                "workers": {
                    "interactive": {"taskSoftTimeLimitSeconds": 4000, "taskTimeLimitSeconds": 4100}
                }
            },
            "workers.interactive.taskTimeLimitSeconds=4100 must be below "
            "config.brokerVisibilityTimeoutSeconds=3600",
        ),
        (
            {"config": {"heartbeatIntervalSeconds": 5}},
            "config.heartbeatIntervalSeconds=5 must be at most half of config.leaseTtlSeconds=8",
        ),
        (
            {
                "config": {"llmTimeoutSeconds": 10},
                "workers": {"batch": {"taskSoftTimeLimitSeconds": 15}},
            },
            "config.limiterMaxWaitSeconds=20 must be below "
            "workers.batch.taskSoftTimeLimitSeconds=15",
        ),
        (
            {
                "config": {"llmTimeoutSeconds": 5, "limiterMaxWaitSeconds": 5},
                "workers": {"batch": {"taskSoftTimeLimitSeconds": 12, "taskTimeLimitSeconds": 20}},
            },
            "config.databaseStatementTimeoutSeconds=15 must be below "
            "workers.batch.taskSoftTimeLimitSeconds=12",
        ),
        (
            {"config": {"redisSocketTimeoutSeconds": 60}},
            "config.redisSocketTimeoutSeconds=60 must be below config.taskSoftTimeLimitSeconds=60",
        ),
        (
            {"config": {"databaseLockTimeoutSeconds": 20}},
            "config.databaseLockTimeoutSeconds=20 must not exceed "
            "config.databaseStatementTimeoutSeconds=15",
        ),
        (
            {
                "config": {
                    "llmTimeoutSeconds": 10,
                    "limiterMaxWaitSeconds": 5,
                    "webhookTimeoutSeconds": 15,
                },
                "workers": {"batch": {"taskSoftTimeLimitSeconds": 12, "taskTimeLimitSeconds": 30}},
            },
            "config.webhookTimeoutSeconds=15 must be below "
            "workers.batch.taskSoftTimeLimitSeconds=12",
        ),
        (
            {"config": {"ocrPageTimeoutSeconds": 60}},
            "config.ocrPageTimeoutSeconds=60 must be below config.taskSoftTimeLimitSeconds=60",
        ),
        ({"postgresql": {"enabled": False}}, "no database: set secrets.databaseUrl"),
        ({"redis": {"enabled": False}}, "no broker: set secrets.redisUrl"),
        ({"secrets": {"existingSecret": "creds"}}, "secrets.existingSecret is for external"),
        (
            {"fakeLlm": {"enabled": False}, "config": {"llmBaseUrl": ""}},
            "config.llmBaseUrl is empty",
        ),
    ],
    ids=lambda v: str(v)[:60] if isinstance(v, dict) else "",
)
def test_incoherent_values_are_refused_with_a_clear_message(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm_python.HelmRenderError) as err:
        render(values)
    assert message in str(err.value)


def test_a_pool_may_run_longer_steps_if_the_chain_still_holds() -> None:
    objects = render(
        {"workers": {"batch": {"taskSoftTimeLimitSeconds": 600, "taskTimeLimitSeconds": 660}}}
    )
    batch = next(
        o
        for o in objects
        if o["metadata"]["name"] == "docpipe-worker-batch" and o["kind"] == "Deployment"
    )
    assert batch["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 660 + 10 + 15


def test_keda_without_its_api_is_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=f"KEDA.*{KEDA_API}"):
        render({"workers": {"batch": {"keda": {"enabled": True}}}})


def test_keda_with_an_external_redis_needs_its_address() -> None:
    values = {
        "postgresql": {"enabled": False},
        "redis": {"enabled": False},
        "secrets": {"databaseUrl": "postgresql://db/docpipe", "redisUrl": "redis://r:6379/0"},
        "workers": {"batch": {"keda": {"enabled": True}}},
    }
    with pytest.raises(helm_python.HelmRenderError, match=r"needs keda\.redisAddress"):
        render(values, api_versions=[KEDA_API])


def test_auth_none_needs_a_second_explicit_value() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"set api\.allowUnauthenticated=true"):
        render({"config": {"auth": "none"}})
    objects = render({"config": {"auth": "none"}, "api": {"allowUnauthenticated": True}})
    assert named(objects, "ConfigMap", "docpipe")["data"]["DOCPIPE_AUTH"] == "none"
    # The consent alone changes nothing: keys are still asked.
    alone = render({"api": {"allowUnauthenticated": True}})
    assert named(alone, "ConfigMap", "docpipe")["data"]["DOCPIPE_AUTH"] == "keys"
