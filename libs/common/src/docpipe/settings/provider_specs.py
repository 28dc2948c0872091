"""The providers docpipe may call (``DOCPIPE_PROVIDERS``), checked as a whole at start-up.

Each provider is an OpenAI-compatible endpoint with its key (read from an environment
variable, which Kubernetes fills from a Secret), the limits it states (calls in flight,
requests and tokens per minute, for the key and per model), how it shapes answers (output
mode) and its models, each with its price, speed tier and optionally a fallback model that
may live on another provider. Without ``DOCPIPE_PROVIDERS`` one provider is made from the
one-provider settings (``DOCPIPE_LLM_BASE_URL``, ``DOCPIPE_LLM_API_KEY``,
``DOCPIPE_MODEL_PRICES``, ``DOCPIPE_PROVIDER_RPM``...), so a real provider stays one
environment variable away.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = [
    "BatchInterfaceSpec",
    "ModelPrice",
    "ModelSpec",
    "OutputMode",
    "ProviderSpec",
    "ProviderTable",
    "ResolvedModel",
    "ResolvedProvider",
    "SpeedTier",
    "resolve_providers",
]

SETTING = "DOCPIPE_PROVIDERS"


class OutputMode(StrEnum):
    """How a provider is asked to shape the answer."""

    JSON_SCHEMA = "json_schema"  # constrained to the step's schema (strict mode)
    JSON_OBJECT = "json_object"  # any JSON object; docpipe validates the schema after
    NONE = "none"  # free text; docpipe finds the JSON object in it


class ModelPrice(BaseModel):
    """USD per million tokens, as providers publish them."""

    input_per_mtok: Decimal = Field(ge=0)
    output_per_mtok: Decimal = Field(ge=0)

    def cost(self, input_tokens: int, output_tokens: int) -> Decimal:
        total = input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok
        return (total / 1_000_000).quantize(Decimal("0.000001"))


class SpeedTier(StrEnum):
    """How fast a model answers, relative to the others a step may choose from."""

    FAST = "fast"
    STANDARD = "standard"
    SLOW = "slow"

    @property
    def rank(self) -> int:
        return list(SpeedTier).index(self)


_SPEC = ConfigDict(extra="forbid", frozen=True)


class BatchInterfaceSpec(BaseModel):
    """A provider's batch interface (docpipe.state.provider_batches): the same requests
    answered within a completion window at a discount, in batches within its limits."""

    model_config = _SPEC

    # openai: OpenAI's /v1/files + /v1/batches (JSON lines in and out), which other
    # providers serve too at the same paths; anthropic: Anthropic's Message Batches
    # (/v1/messages/batches), real time staying on its OpenAI-compatible chat completions.
    interface: Literal["openai", "anthropic"] = "openai"
    # The share of the real-time price a batch answer costs (prices per model as usual).
    discount: Decimal = Field(default=Decimal("0.5"), gt=0, le=1)
    max_requests: int = Field(default=50_000, ge=1)  # per provider batch
    # Of its requests (OpenAI's input file; Anthropic's create request).
    max_bytes: int = Field(default=200 * 1024 * 1024, ge=1)
    completion_window: str = Field(default="24h", pattern=r"^[1-9][0-9]{0,5}[smh]$")

    def price(self, price: ModelPrice) -> ModelPrice:
        """``price`` at this interface's discount."""
        return ModelPrice(
            input_per_mtok=price.input_per_mtok * self.discount,
            output_per_mtok=price.output_per_mtok * self.discount,
        )

    @property
    def window_s(self) -> float:
        """The completion window in seconds."""
        unit = {"s": 1, "m": 60, "h": 3600}[self.completion_window[-1]]
        return float(int(self.completion_window[:-1]) * unit)


class ModelSpec(BaseModel):
    """One model of a provider."""

    model_config = _SPEC

    # Checked with the whole table, so that a missing price names the provider and model.
    input_per_mtok: Decimal | None = Field(default=None, ge=0)
    output_per_mtok: Decimal | None = Field(default=None, ge=0)
    rpm: int = Field(default=0, ge=0)  # 0: learn it from the provider's headers, if it states it
    tpm: int = Field(default=0, ge=0)
    speed: SpeedTier = SpeedTier.STANDARD
    fallback: str | None = None  # tried when this model's answer stays invalid
    output_mode: OutputMode | None = None  # default: the provider's
    max_output_tokens: int | None = Field(default=None, ge=1)  # caps every step's max_tokens
    temperature: float = Field(default=0.0, ge=0, le=2)
    seed: int | None = None
    upstream_name: str | None = Field(default=None, min_length=1)  # the name the provider knows


class ProviderSpec(BaseModel):
    """One OpenAI-compatible endpoint."""

    model_config = _SPEC

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    base_url: str = Field(pattern=r"^https?://\S+$")
    # The variable holding the key; default DOCPIPE_PROVIDER_<NAME>_API_KEY (no key: none sent).
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    max_concurrency: int = Field(default=64, ge=1)
    # Limits of the key, shared by all its models (0: none); models have their own too.
    rpm: int = Field(default=0, ge=0)
    tpm: int = Field(default=0, ge=0)
    burst: int = Field(default=0, ge=0)  # requests at once (0: one second's worth of rpm)
    output_mode: OutputMode = OutputMode.JSON_SCHEMA
    # Newer OpenAI models want max_completion_tokens; most servers read max_tokens.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    # How json_schema mode sends the schema: OpenAI's response_format (OpenAI, vLLM, Ollama,
    # llama.cpp's own server), or {"type": "json_object", "schema": ...} for the server of
    # llama-cpp-python, which refuses the former.
    json_schema_style: Literal["openai", "llama_cpp_python"] = "openai"
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    # Its batch interface, if it has one: runs of a batch that asks for the provider-batch
    # lane send their calls to these models through it.
    batch: BatchInterfaceSpec | None = None


@dataclass(frozen=True)
class ResolvedProvider:
    name: str
    base_url: str
    api_key: SecretStr
    max_concurrency: int
    rpm: int
    tpm: int
    burst: int
    max_tokens_field: str
    json_schema_style: str = "openai"
    batch: BatchInterfaceSpec | None = None


@dataclass(frozen=True)
class ResolvedModel:
    """A model as docpipe calls it: where, at what price, how fast, how shaped."""

    name: str
    provider: ResolvedProvider
    price: ModelPrice
    rpm: int
    tpm: int
    speed: SpeedTier
    fallback: str | None
    output_mode: OutputMode
    max_output_tokens: int | None
    temperature: float
    seed: int | None
    upstream_name: str

    def max_tokens(self, asked: int) -> int:
        """The output budget sent for a step that asks for ``asked`` tokens."""
        return min(asked, self.max_output_tokens) if self.max_output_tokens else asked


@dataclass(frozen=True)
class ProviderTable:
    providers: tuple[ResolvedProvider, ...]
    models: Mapping[str, ResolvedModel]

    def model(self, name: str) -> ResolvedModel:
        """The model called ``name``; an unknown one is a configuration error."""
        try:
            return self.models[name]
        except KeyError:
            raise KeyError(
                f"model {name!r} is on no provider in {SETTING} / DOCPIPE_MODEL_PRICES "
                f"(known: {', '.join(sorted(self.models))})"
            ) from None


def resolve_providers(
    specs: list[ProviderSpec], *, default_max_tokens: int, explicit: bool = True
) -> ProviderTable:
    """The checked table of ``specs``; a ValueError naming the setting otherwise.

    ``explicit`` is False for the provider made from the one-provider settings, whose
    errors then name those settings instead.
    """
    setting = SETTING if explicit else "DOCPIPE_MODEL_PRICES"
    if not specs:
        raise ValueError(f"{SETTING}: no provider")
    providers: list[ResolvedProvider] = []
    models: dict[str, ResolvedModel] = {}
    where: dict[str, str] = {}
    for i, spec in enumerate(specs):
        at = f"{SETTING}[{i}] ({spec.name})" if explicit else setting
        if spec.name in {p.name for p in providers}:
            raise ValueError(f"{at}: provider name {spec.name!r} is used twice")
        if not spec.models:
            raise ValueError(f"{at}: a provider without models (list them under 'models')")
        provider = ResolvedProvider(
            name=spec.name,
            base_url=spec.base_url,
            api_key=_api_key(spec, at) if explicit else SecretStr(""),
            max_concurrency=spec.max_concurrency,
            rpm=spec.rpm,
            tpm=spec.tpm,
            burst=spec.burst,
            max_tokens_field=spec.max_tokens_field,
            json_schema_style=spec.json_schema_style,
            batch=spec.batch,
        )
        providers.append(provider)
        for name, model in spec.models.items():
            if name in models:
                raise ValueError(
                    f"{SETTING}: model {name!r} is on two providers, {where[name]} and {at}; "
                    f"give one of them another name (and set its upstream_name)"
                )
            models[name] = _resolve_model(name, model, spec, provider, at)
            where[name] = at
    table = ProviderTable(tuple(providers), models)
    _check_fallbacks(table, where)
    _check_tpm(table, where, default_max_tokens, "the key" if explicit else "DOCPIPE_PROVIDER_TPM")
    return table


def _api_key(spec: ProviderSpec, at: str) -> SecretStr:
    variable = spec.api_key_env or f"DOCPIPE_PROVIDER_{spec.name.upper().replace('-', '_')}_API_KEY"
    value = os.environ.get(variable)
    if value is None and spec.api_key_env is not None:
        raise ValueError(f"{at}: api_key_env names {variable}, which is not set")
    return SecretStr(value or "")


def _resolve_model(
    name: str, model: ModelSpec, spec: ProviderSpec, provider: ResolvedProvider, at: str
) -> ResolvedModel:
    if model.input_per_mtok is None or model.output_per_mtok is None:
        raise ValueError(
            f"{at}: model {name!r} has no price: set input_per_mtok and output_per_mtok "
            f"(USD per million tokens; a local model may cost 0, but say so)"
        )
    return ResolvedModel(
        name=name,
        provider=provider,
        price=ModelPrice(
            input_per_mtok=model.input_per_mtok, output_per_mtok=model.output_per_mtok
        ),
        rpm=model.rpm,
        tpm=model.tpm,
        speed=model.speed,
        fallback=model.fallback,
        output_mode=model.output_mode or spec.output_mode,
        max_output_tokens=model.max_output_tokens,
        temperature=model.temperature,
        seed=model.seed,
        upstream_name=model.upstream_name or name,
    )


def _check_fallbacks(table: ProviderTable, where: Mapping[str, str]) -> None:
    for name, model in table.models.items():
        if model.fallback is None:
            continue
        if model.fallback not in table.models:
            raise ValueError(
                f"{where[name]}: the fallback {model.fallback!r} of model {name!r} is on no "
                f"provider"
            )
        chain: list[str] = [name]
        current: str | None = model.fallback
        while current is not None:
            if current in chain:
                loop = " -> ".join([*chain[chain.index(current) :], current])
                raise ValueError(f"{where[name]}: fallback loop {loop}")
            chain.append(current)
            following: str | None = table.models[current].fallback
            current = following


def _check_tpm(
    table: ProviderTable, where: Mapping[str, str], default_max_tokens: int, key: str
) -> None:
    """A token bucket holds one minute's worth; a request larger than that never goes out."""
    for name, model in table.models.items():
        least = model.max_tokens(default_max_tokens)
        for limit, scope in ((model.tpm, f"model {name!r}"), (model.provider.tpm, key)):
            if limit and limit < least:
                raise ValueError(
                    f"{where[name]}: the tpm of {scope} ({limit}) is below one request's "
                    f"estimate ({least} output tokens from DOCPIPE_DEFAULT_MAX_TOKENS="
                    f"{default_max_tokens}, plus its prompt): no request would ever be sent"
                )
