import base64
import ipaddress
import json
from decimal import Decimal
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic import ValidationError

from docpipe.settings import Settings, get_settings


def test_defaults_are_coherent() -> None:
    s = Settings()
    assert s.llm_timeout_s < s.task_soft_time_limit_s < s.task_time_limit_s
    assert s.task_time_limit_s < s.broker_visibility_timeout_s
    assert s.task_soft_time_limit_s + s.llm_timeout_s < s.task_time_limit_s


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"llm_timeout_s": 60, "task_soft_time_limit_s": 60}, "DOCPIPE_LLM_TIMEOUT_S=60"),
        ({"task_soft_time_limit_s": 95}, "DOCPIPE_TASK_SOFT_TIME_LIMIT_S=95"),
        ({"task_time_limit_s": 70}, r"DOCPIPE_TASK_SOFT_TIME_LIMIT_S \+ DOCPIPE_LLM_TIMEOUT_S=80"),
        ({"broker_visibility_timeout_s": 70}, "DOCPIPE_BROKER_VISIBILITY_TIMEOUT_S=70"),
        ({"heartbeat_interval_s": 6}, "DOCPIPE_HEARTBEAT_INTERVAL_S=6"),
        ({"retry_backoff_base_s": 100}, "DOCPIPE_RETRY_BACKOFF_BASE_S"),
    ],
)
def test_incoherent_limits_are_refused_with_the_variable_named(
    overrides: dict[str, float], named: str
) -> None:
    with pytest.raises(ValidationError, match=named):
        Settings(**overrides)  # type: ignore[arg-type]


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCPIPE_TASK_TIME_LIMIT_S", "50")
    get_settings.cache_clear()
    try:
        with pytest.raises(ValidationError, match="must be below DOCPIPE_TASK_TIME_LIMIT_S=50"):
            get_settings()
    finally:
        get_settings.cache_clear()


def test_prices_are_per_million_tokens_and_unknown_models_are_an_error() -> None:
    table = Settings().provider_table
    assert table.model("gpt-4o-mini").price.cost(1_000_000, 1_000_000) == Decimal("0.75")
    assert table.model("gpt-4o-mini").price.cost(1000, 100) == Decimal("0.000210")
    with pytest.raises(KeyError, match="'mystery-model' is on no provider"):
        table.model("mystery-model")


def test_price_table_is_read_from_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "DOCPIPE_MODEL_PRICES", '{"m1": {"input_per_mtok": 1, "output_per_mtok": 2}}'
    )
    price = Settings().provider_table.model("m1").price
    assert price.cost(500_000, 500_000) == Decimal("1.5")


def provider(name: str, models: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": name, "base_url": f"http://{name}.example/v1", "models": models, **more}


PRICED = {"input_per_mtok": 1, "output_per_mtok": 2}


def test_providers_as_a_list_with_a_fallback_on_another_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCPIPE_PROVIDER_BACKUP_API_KEY", "sk-backup")
    providers = [
        provider(
            "main",
            {"m1": {**PRICED, "fallback": "b1", "rpm": 500, "tpm": 90000, "speed": "fast"}},
            output_mode="json_object",
        ),
        provider("backup", {"b1": {**PRICED, "output_mode": "none", "upstream_name": "big"}}),
    ]
    monkeypatch.setenv("DOCPIPE_PROVIDERS", json.dumps(providers))
    table = Settings().provider_table
    m1, b1 = table.model("m1"), table.model("b1")
    assert (m1.provider.name, m1.fallback, m1.rpm, m1.tpm, m1.output_mode) == (
        "main",
        "b1",
        500,
        90000,
        "json_object",
    )
    assert (b1.provider.name, b1.output_mode, b1.upstream_name) == ("backup", "none", "big")
    assert b1.provider.api_key.get_secret_value() == "sk-backup"
    assert m1.provider.api_key.get_secret_value() == ""


def test_the_one_provider_settings_are_a_provider_of_their_own() -> None:
    s = Settings(
        llm_base_url="http://llm.local/v1",
        provider_rpm=60,
        provider_tpm=50_000,
        llm_output_mode="json_object",
    )  # type: ignore[arg-type]
    (only,) = s.provider_table.providers
    assert (only.base_url, only.rpm, only.tpm) == ("http://llm.local/v1", 60, 50_000)
    assert s.provider_table.model("gpt-4o").output_mode == "json_object"


@pytest.mark.parametrize(
    ("providers", "named"),
    [
        ([provider("a", {})], r"DOCPIPE_PROVIDERS\[0\] \(a\): a provider without models"),
        (
            [provider("a", {"m": PRICED}), provider("b", {"m": PRICED})],
            r"model 'm' is on two providers, DOCPIPE_PROVIDERS\[0\] \(a\) and "
            r"DOCPIPE_PROVIDERS\[1\] \(b\)",
        ),
        (
            [provider("a", {"m": {**PRICED, "fallback": "n"}, "n": {**PRICED, "fallback": "m"}})],
            r"DOCPIPE_PROVIDERS\[0\] \(a\): fallback loop m -> n -> m",
        ),
        ([provider("a", {"m": {**PRICED, "fallback": "x"}})], "the fallback 'x' of model 'm'"),
        (
            [provider("a", {"m": {"input_per_mtok": 1}})],
            r"DOCPIPE_PROVIDERS\[0\] \(a\): model 'm' has no price",
        ),
        (
            [provider("a", {"m": {**PRICED, "tpm": 500}})],
            r"the tpm of model 'm' \(500\) is below one request's estimate",
        ),
        ([provider("a", {"m": PRICED}, tpm=100)], r"the tpm of the key \(100\)"),
        (
            [provider("a", {"m": PRICED}, api_key_env="NOT_SET_ANYWHERE")],
            "api_key_env names NOT_SET_ANYWHERE, which is not set",
        ),
        ([provider("a", {"m": PRICED}), provider("a", {"n": PRICED})], "'a' is used twice"),
    ],
)
def test_bad_provider_settings_stop_start_up_naming_the_setting(
    providers: list[dict[str, Any]], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCPIPE_PROVIDERS", json.dumps(providers))
    with pytest.raises(ValidationError, match=named):
        Settings()


def test_a_provider_tpm_below_the_default_output_budget_names_both_settings() -> None:
    with pytest.raises(ValidationError, match=r"DOCPIPE_PROVIDER_TPM.*DOCPIPE_DEFAULT_MAX_TOKENS"):
        Settings(provider_tpm=1000, default_max_tokens=2000)


def test_the_removed_global_webhook_secret_is_refused_with_what_replaced_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCPIPE_WEBHOOK_SECRET", "shared-by-everyone")
    with pytest.raises(ValidationError, match=r"no longer read: .*POST /webhook-secret"):
        Settings()


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "DOCPIPE_WEBHOOKS_ENABLED=true needs DOCPIPE_SECRETS_KEY"),
        ("changeme", "must be a Fernet key"),
        ("A" * 43 + "=", "looks like a placeholder"),
        (base64.urlsafe_b64encode(b"password" * 4).decode(), "looks like a placeholder"),
    ],
)
def test_webhooks_refuse_to_start_without_a_real_secrets_key(key: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(webhooks_enabled=True, secrets_key=key)  # type: ignore[arg-type]


def test_a_generated_secrets_key_is_accepted_and_webhooks_are_off_without_one() -> None:
    key = Fernet.generate_key().decode()
    assert Settings(webhooks_enabled=True, secrets_key=key).webhooks_enabled  # type: ignore[arg-type]
    assert not Settings().webhooks_enabled


def test_a_webhook_attempt_must_end_before_the_soft_time_limit() -> None:
    with pytest.raises(ValidationError, match="DOCPIPE_WEBHOOK_TIMEOUT_S=60 must be below"):
        Settings(webhook_timeout_s=60)


def test_the_webhook_allowlist_is_read_from_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS", "127.0.0.1, fd00::/8,Hooks.Internal")
    assert Settings().webhook_allowed_destinations == (
        ipaddress.ip_network("127.0.0.1/32"),
        ipaddress.ip_network("fd00::/8"),
        "hooks.internal",
    )
    monkeypatch.setenv("DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS", "10.0.0.0/8,not a host!")
    with pytest.raises(ValidationError, match="DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS"):
        Settings()
    monkeypatch.setenv("DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS", "hooks internal!")
    with pytest.raises(ValidationError, match="neither a CIDR nor a host name"):
        Settings()
