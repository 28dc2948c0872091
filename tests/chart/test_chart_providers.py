"""Providers as a list in the chart: config.providers becomes DOCPIPE_PROVIDERS, each
provider's key a Secret key its containers read, and what renders is what the library
accepts at start-up."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import helm_python
import pytest

from docpipe.settings import Settings
from tests.chart.helm import chart, env_of, named, pod_specs, render

PROVIDERS = [
    {
        "name": "openai",
        "base_url": "https://api.openai.com/v1",
        "output_mode": "json_schema",
        "models": {
            "gpt-4o-mini": {
                "input_per_mtok": 0.15,
                "output_per_mtok": 0.6,
                "rpm": 500,
                "tpm": 200000,
                "speed": "fast",
                "fallback": "backup-large",
            }
        },
    },
    {
        "name": "local-vllm",
        "base_url": "http://vllm.llm.svc:8000/v1",
        "max_concurrency": 8,
        "models": {
            "backup-large": {
                "input_per_mtok": 0,
                "output_per_mtok": 0,
                "upstream_name": "Qwen/Qwen2.5-7B-Instruct",
            }
        },
    },
]
VALUES = {
    "fakeLlm": {"enabled": False},
    "config": {"llmBaseUrl": "", "providers": PROVIDERS},
    "secrets": {"providerApiKeys": {"openai": "sk-live-123"}},
}


def test_providers_render_into_the_configmap_and_their_keys_into_the_secret() -> None:
    objects = render(VALUES)
    data = named(objects, "ConfigMap", "docpipe")["data"]
    assert json.loads(data["DOCPIPE_PROVIDERS"]) == PROVIDERS
    assert "DOCPIPE_LLM_BASE_URL" not in data
    secret = named(objects, "Secret", "docpipe")["data"]
    assert base64.b64decode(secret["DOCPIPE_PROVIDER_OPENAI_API_KEY"]) == b"sk-live-123"
    assert base64.b64decode(secret["DOCPIPE_PROVIDER_LOCAL_VLLM_API_KEY"]) == b""
    readers = [
        container
        for workload, spec in pod_specs(objects)
        if workload["kind"] == "Deployment"
        for container in spec["containers"]
        if "DOCPIPE_DATABASE_URL" in env_of(container)
    ]
    assert len(readers) >= 4  # the API, both worker pools and beat
    for container in readers:
        ref = env_of(container)["DOCPIPE_PROVIDER_OPENAI_API_KEY"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("docpipe", "DOCPIPE_PROVIDER_OPENAI_API_KEY")


def test_what_renders_is_accepted_by_the_library_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects = render(VALUES)
    env = dict(named(objects, "ConfigMap", "docpipe")["data"])
    env |= {
        k: base64.b64decode(v).decode()
        for k, v in named(objects, "Secret", "docpipe")["data"].items()
    }
    for key in [k for k in os.environ if k.startswith("DOCPIPE_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    table = Settings().provider_table
    assert table.model("gpt-4o-mini").provider.api_key.get_secret_value() == "sk-live-123"
    assert table.model("backup-large").upstream_name == "Qwen/Qwen2.5-7B-Instruct"


@pytest.mark.parametrize(
    "provider",
    [
        {"base_url": "http://x/v1", "models": {}},  # no name
        {"name": "Bad Name", "base_url": "http://x/v1", "models": {"m": {}}},
        {"name": "a", "base_url": "http://x/v1", "models": {"m": {"input_per_mtok": 1}}},
        {
            "name": "a",
            "base_url": "http://x/v1",
            "models": {"m": {"input_per_mtok": 1, "output_per_mtok": 1, "speed": "warp"}},
        },
        {"name": "a", "base_url": "http://x/v1", "apiKey": "sk-in-values", "models": {}},
    ],
)
def test_the_schema_refuses_malformed_providers(provider: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        chart().validate_schema({"config": {"providers": [provider]}})
