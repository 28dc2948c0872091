import base64
from decimal import Decimal

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
    s = Settings()
    assert s.price_of("gpt-4o-mini").cost(1_000_000, 1_000_000) == Decimal("0.75")
    assert s.price_of("gpt-4o-mini").cost(1000, 100) == Decimal("0.000210")
    with pytest.raises(KeyError, match="no price"):
        s.price_of("mystery-model")


def test_price_table_is_read_from_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "DOCPIPE_MODEL_PRICES", '{"m1": {"input_per_mtok": 1, "output_per_mtok": 2}}'
    )
    assert Settings().price_of("m1").cost(500_000, 500_000) == Decimal("1.5")


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
    assert Settings().webhook_allowed_destinations == ("127.0.0.1/32", "fd00::/8", "hooks.internal")
    monkeypatch.setenv("DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS", "10.0.0.0/8,not a host!")
    with pytest.raises(ValidationError, match="DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS"):
        Settings()
