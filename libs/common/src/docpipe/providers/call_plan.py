"""A call as it will be sent: which model on which provider, the request's body, its output
budget, and what it is estimated to cost (tokens for the limiter, USD for the budget).

Kept apart from the step context so that the context only decides *whether* and *in what
order* calls go out; what goes out is decided here from the provider table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from docpipe.errors import InvalidOutputError, PermanentLLMError, TruncatedOutputError
from docpipe.provider_specs import ProviderTable, ResolvedModel
from docpipe.providers.client import ChatRequest, Completion, estimate_prompt_tokens, parse_output
from docpipe.providers.routing import Candidate
from docpipe.structured_output import OutputMode, StrictSchemaError, schema_name, strict_schema

__all__ = ["PlannedCall", "candidates_of", "plan_call", "read_answer"]


@dataclass(frozen=True)
class PlannedCall:
    model: ResolvedModel
    request: ChatRequest
    # ceil(prompt characters / 3) + max_tokens: what the TPM bucket is charged up front.
    estimated_tokens: int
    estimated_cost: Decimal
    route_reason: str

    def log_params(self) -> dict[str, Any]:
        """What the call's llm_call_log row records about the request before it is sent."""
        return {
            "provider": self.model.provider.name,
            "route_reason": self.route_reason,
            "output_mode": self.request.output_mode.value,
            "max_tokens": self.request.max_tokens,
            "temperature": self.request.temperature,
            "seed": self.request.seed,
        }


def plan_call(
    model: ResolvedModel,
    messages: Sequence[Mapping[str, str]],
    schema: Mapping[str, Any],
    *,
    step: str,
    max_tokens: int,
    reason: str,
) -> PlannedCall:
    """The request for ``model`` with its estimates; a schema that strict mode cannot take
    is a PermanentLLMError naming the step (registration refuses those it can see)."""
    budget = model.max_tokens(max_tokens)
    sent_schema = None
    if model.output_mode == OutputMode.JSON_SCHEMA:
        try:
            sent_schema = _strict(schema)
        except StrictSchemaError as exc:
            raise PermanentLLMError(
                f"step {step}: its answer schema cannot be sent in json_schema mode: {exc}",
                kind="schema_not_strict",
            ) from None
    request = ChatRequest(
        model=model.upstream_name,
        messages=tuple(messages),
        output_mode=model.output_mode,
        schema=sent_schema,
        schema_name=schema_name(step),
        max_tokens=budget,
        temperature=model.temperature,
        seed=model.seed,
        max_tokens_field=model.provider.max_tokens_field,
        json_schema_style=model.provider.json_schema_style,
        provider=model.provider.name,
    )
    prompt = estimate_prompt_tokens(messages)
    return PlannedCall(
        model=model,
        request=request,
        estimated_tokens=prompt + budget,
        estimated_cost=model.price.cost(prompt, budget),
        route_reason=reason,
    )


def candidates_of(
    table: ProviderTable,
    models: Sequence[str],
    prompt: Sequence[Mapping[str, str]],
    max_tokens: int,
) -> list[Candidate]:
    """The router's view of ``models``: speed tier and estimated cost of this prompt."""
    tokens = estimate_prompt_tokens(prompt)
    return [
        Candidate(
            name,
            table.model(name).speed,
            table.model(name).price.cost(tokens, table.model(name).max_tokens(max_tokens)),
        )
        for name in models
    ]


def read_answer(
    completion: Completion, schema: Mapping[str, Any], planned: PlannedCall
) -> dict[str, Any]:
    """The answer's JSON object, valid against the step's ``schema``; InvalidOutputError, or
    TruncatedOutputError when an unusable answer was cut off at its max_tokens."""
    strict = planned.request.output_mode == OutputMode.JSON_SCHEMA
    try:
        return parse_output(completion.content, schema, strict=strict)
    except InvalidOutputError as exc:
        if completion.finish_reason == "length":
            raise TruncatedOutputError(
                f"answer cut off at max_tokens={planned.request.max_tokens} "
                f"({completion.output_tokens} tokens): {exc}"
            ) from None
        raise


# Schema id -> (the schema, its strict form), as for validators: converted once per schema.
_STRICT: dict[int, tuple[Mapping[str, Any], dict[str, Any]]] = {}


def _strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    cached = _STRICT.get(id(schema))
    if cached is None or cached[0] is not schema:
        if len(_STRICT) >= 256:
            _STRICT.clear()
        cached = _STRICT[id(schema)] = (schema, strict_schema(schema))
    return cached[1]
