from decimal import Decimal

import pytest
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
