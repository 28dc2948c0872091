"""The chart's `config` is docpipe's Settings: every setting a deployment may tune is exposed
under the name of its DOCPIPE_* variable, with the library's own default, and every rendered
value parses as the library reads it. A setting added to the library without the chart fails
here."""

from __future__ import annotations

import base64
import os

import pytest

from docpipe.settings import Settings
from tests.chart.helm import chart, named, render, value_sets

# Settings that are not plain ConfigMap entries: credentials (the Secret), the liveness file
# (set per container), prices and the provider URL (their own config keys).
NOT_IN_CONFIGMAP = {
    "database_url",
    "lease_database_url",
    "redis_url",
    "llm_api_key",
    "secrets_key",
    "liveness_file",
    "model_prices",
    "llm_base_url",
    "pipeline_modules",
    "pipelines_dir",
    "providers",
}


def field_of(env: str) -> str:
    return env.removeprefix("DOCPIPE_").lower()


def test_every_library_setting_is_exposed_by_the_chart() -> None:
    data = named(render(), "ConfigMap", "docpipe")["data"]
    # Credentials come from the Secret; the liveness file and the metrics port are set per
    # container (workers and beat); prices from config.modelPrices, pipeline modules from
    # config.pipelineModules, the pipelines folder from `pipelines` (each rendered when set);
    # the metrics server listens on every interface by default, as a pod's must; the OCR
    # page time limit is rendered when set (unset: half the soft time limit), and so is the
    # PDF page time limit (unset: a third of it); the worker pool's kind is set per
    # worker Deployment (workers.<lane>.pool); the probes' port is set on the API's
    # container (api.probePort), and their server listens on every interface, as the
    # metrics server does.
    exposed = {field_of(env) for env in data} | {
        "database_url",
        "lease_database_url",
        "redis_url",
        "llm_api_key",
        "secrets_key",
        "liveness_file",
        "metrics_port",
        "model_prices",
        "metrics_host",
        "pipeline_modules",
        "pipelines_dir",
        "providers",
        "ocr_page_timeout_s",
        "pdf_page_timeout_s",
        "worker_pool",
        "probe_port",
        "probe_host",
    }
    missing = set(Settings.model_fields) - exposed
    assert missing == set(), f"add to the chart's config (values, schema, helpers): {missing}"


def test_chart_defaults_are_the_library_defaults() -> None:
    data = named(render(), "ConfigMap", "docpipe")["data"]
    defaults = Settings()
    unknown, different = [], []
    for env, text in data.items():
        name = field_of(env)
        if name in NOT_IN_CONFIGMAP:
            continue
        if name not in Settings.model_fields:
            unknown.append(env)
            continue
        default = getattr(defaults, name)
        if isinstance(default, str):
            same = text == default
        elif isinstance(default, tuple):
            same = text == ",".join(default)
        elif isinstance(default, bool):
            same = text == str(default).lower()
        else:
            same = float(text) == float(default)
        if not same:
            different.append(f"{env}={text} (library: {default})")
    assert unknown == [], "the chart sets variables the library does not read"
    assert different == [], "chart defaults differ from the library's"


@pytest.mark.parametrize("name", sorted(value_sets()))
def test_rendered_configuration_is_accepted_by_the_library(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    values, api_versions = value_sets()[name]
    objects = render(values, api_versions=api_versions)
    env = dict(named(objects, "ConfigMap", "docpipe")["data"])
    for secret in (o for o in objects if o["kind"] == "Secret"):
        env |= {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    for key in [k for k in os.environ if k.startswith("DOCPIPE_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("DOCPIPE_"):
            monkeypatch.setenv(key, value)
    settings = Settings()  # as every process reads them, validators included
    assert settings.llm_base_url == env["DOCPIPE_LLM_BASE_URL"]


def test_chart_config_keys_match_the_values_file() -> None:
    values_config = set(chart().values["config"]) - {
        "llmBaseUrl",
        "modelPrices",
        "pipelineModules",
        "extraEnv",
        "providers",
    }
    data = named(render(), "ConfigMap", "docpipe")["data"]
    assert len(values_config) == len(data) - 1  # DOCPIPE_LLM_BASE_URL has its own key
