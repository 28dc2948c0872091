"""The providers docpipe may call: a list (``DOCPIPE_PROVIDERS``), or one provider made of
the one-provider settings, resolved at start-up into the table every call is routed by
(:mod:`docpipe.settings.provider_specs`)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Self

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, model_validator

from docpipe.settings.provider_specs import (
    ModelPrice,
    ModelSpec,
    OutputMode,
    ProviderSpec,
    ProviderTable,
    resolve_providers,
)

__all__ = ["DEFAULT_PRICES", "ProviderSettings"]

DEFAULT_PRICES = {
    "gpt-4o-mini": ModelPrice(input_per_mtok=Decimal("0.15"), output_per_mtok=Decimal("0.60")),
    "gpt-4o": ModelPrice(input_per_mtok=Decimal("2.50"), output_per_mtok=Decimal("10.00")),
}


class ProviderSettings(BaseModel):
    """Providers"""

    # Providers as a list (see docpipe.settings.provider_specs); when empty, one provider is made of
    # the one-provider settings below (llm_base_url ... provider_tpm).
    providers: list[ProviderSpec] = Field(
        default_factory=list,
        description=(
            "providers as a JSON list ([Providers](../guides/providers.md)); replaces the "
            "one-provider settings (`DOCPIPE_LLM_BASE_URL`, `DOCPIPE_MODEL_PRICES`, "
            "`DOCPIPE_LLM_OUTPUT_MODE`, `DOCPIPE_PROVIDER_RPM`/`_BURST`/`_TPM`/`_MAX_CONCURRENCY`);"
            " each key from `DOCPIPE_PROVIDER_<NAME>_API_KEY`"
        ),
    )
    llm_base_url: str = Field(
        default="http://127.0.0.1:8100/v1",
        description="any OpenAI-compatible endpoint (the one-provider shorthand)",
    )
    llm_api_key: SecretStr = Field(
        default=SecretStr(""), description="its key (from a Secret; never logged)"
    )
    model_prices: dict[str, ModelPrice] = Field(
        default_factory=lambda: dict(DEFAULT_PRICES),
        description=(
            'JSON `{"model": {"input_per_mtok": .., "output_per_mtok": ..}}`, USD per million '
            "tokens; an unpriced model is an error"
        ),
    )
    llm_output_mode: OutputMode = Field(
        default=OutputMode.JSON_SCHEMA,
        description=(
            "how answers are constrained: `json_schema` (strict, the step's schema), `json_object`,"
            " `none`"
        ),
    )
    default_max_tokens: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description=(
            "a step's output budget (`max_tokens`, sent with every call) unless the step sets its "
            "own"
        ),
    )
    # The one provider's limit, shared by every worker (in Redis). 0 requests/min: no rate limit.
    provider_rpm: int = Field(
        default=0,
        ge=0,
        description="the provider's requests/minute, shared by all workers (0: no rate limit)",
    )
    provider_burst: int = Field(
        default=0, ge=0, description="token-bucket depth (0: one second's worth)"
    )
    provider_tpm: int = Field(
        default=0,
        ge=0,
        description=(
            "the provider's tokens/minute, shared by all workers (0: no limit; the provider's "
            "headers still count)"
        ),
    )
    provider_max_concurrency: int = Field(
        default=64, ge=1, description="provider calls in flight across all workers"
    )

    _provider_table: ProviderTable = PrivateAttr()

    @model_validator(mode="after")
    def _providers_resolve(self) -> Self:
        self._provider_table = self._resolve_providers()
        return self

    @property
    def provider_table(self) -> ProviderTable:
        """Every provider and model docpipe may call, checked at start-up."""
        return self._provider_table

    def _resolve_providers(self) -> ProviderTable:
        if self.providers:
            return resolve_providers(self.providers, default_max_tokens=self.default_max_tokens)
        shorthand = ProviderSpec(
            name="default",
            base_url=self.llm_base_url,
            max_concurrency=self.provider_max_concurrency,
            rpm=self.provider_rpm,
            tpm=self.provider_tpm,
            burst=self.provider_burst,
            output_mode=self.llm_output_mode,
            models={
                name: ModelSpec(input_per_mtok=p.input_per_mtok, output_per_mtok=p.output_per_mtok)
                for name, p in self.model_prices.items()
            },
        )
        table = resolve_providers(
            [shorthand], default_max_tokens=self.default_max_tokens, explicit=False
        )
        provider = dataclasses.replace(table.providers[0], api_key=self.llm_api_key)
        return ProviderTable(
            (provider,),
            {name: dataclasses.replace(m, provider=provider) for name, m in table.models.items()},
        )
