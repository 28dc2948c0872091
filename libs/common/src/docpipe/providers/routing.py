"""Which model answers a step's call, and the request that is sent to it.

The model is chosen from the step's candidates by the run's priority and the budget it has
left (:func:`choose_model`; pure: the caller supplies the estimates, nothing is read there):

- ``urgent``: the fastest candidate (speed tier) that the budget left can pay for;
- ``normal``: the step's own order (its first candidate is its author's choice);
- ``low``: the cheapest candidate by estimated cost.

When the budget left cannot pay for the preferred candidate's estimated cost, the next one
in that order that it can pay for is chosen (necessarily a cheaper one); when it can pay for
none, there is no route and the run stops as ``budget_exceeded`` before anything is sent.
Ties keep the step's order.

The call as it will be sent (:func:`plan_call`, from the provider table): which model on
which provider, the request's body, its output budget, and what it is estimated to cost
(tokens for the limiter, USD for the budget). Kept apart from the step context
(:mod:`docpipe.providers.calls`) so that the context only decides *whether* and *in what
order* calls go out; what goes out is decided here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from docpipe.errors import InvalidOutputError, PermanentLLMError, TruncatedOutputError
from docpipe.json_codec import dumps
from docpipe.pipelines.structured_output import StrictSchemaError, schema_name, strict_schema
from docpipe.providers.client import ChatRequest, Completion, estimate_prompt_tokens, parse_output
from docpipe.settings.provider_specs import (
    ModelPrice,
    OutputMode,
    ProviderTable,
    ResolvedModel,
    SpeedTier,
)
from docpipe.statuses import Priority

__all__ = [
    "Candidate",
    "PlannedCall",
    "Route",
    "RouteReason",
    "candidates_of",
    "choose_model",
    "plan_call",
    "read_answer",
    "request_sha256",
    "step_candidates",
]


class RouteReason(StrEnum):
    """Why a call went to its model: recorded on the call and counted per model."""

    ONLY_CANDIDATE = "only_candidate"
    PREFERRED = "preferred"  # normal priority: the step's first candidate
    FASTEST = "fastest"  # urgent priority
    CHEAPEST = "cheapest"  # low priority
    WITHIN_BUDGET = "within_budget"  # the preferred one would cost more than is left
    FALLBACK = "fallback"  # the routed model's answer stayed invalid


@dataclass(frozen=True)
class Candidate:
    model: str
    speed: SpeedTier
    estimated_cost: Decimal


@dataclass(frozen=True)
class Route:
    model: str
    reason: RouteReason


_FIRST_CHOICE = {
    Priority.URGENT: RouteReason.FASTEST,
    Priority.NORMAL: RouteReason.PREFERRED,
    Priority.LOW: RouteReason.CHEAPEST,
}


def choose_model(
    candidates: Sequence[Candidate], priority: Priority, budget_left: Decimal | None
) -> Route | None:
    """The candidate to call and why, or None when the budget left pays for none."""
    if not candidates:
        raise ValueError("a step has at least one candidate model")
    order = list(range(len(candidates)))
    if priority == Priority.URGENT:
        order.sort(key=lambda i: candidates[i].speed.rank)
    elif priority == Priority.LOW:
        order.sort(key=lambda i: candidates[i].estimated_cost)
    for rank, i in enumerate(order):
        if budget_left is None or candidates[i].estimated_cost <= budget_left:
            if rank > 0:
                reason = RouteReason.WITHIN_BUDGET
            elif len(candidates) == 1:
                reason = RouteReason.ONLY_CANDIDATE
            else:
                reason = _FIRST_CHOICE[priority]
            return Route(candidates[i].model, reason)
    return None


def step_candidates(model: str, candidates: Sequence[str]) -> tuple[str, ...]:
    """The models a step may be routed to: its candidates, or its one model."""
    return tuple(candidates) or (model,)


@dataclass(frozen=True)
class PlannedCall:
    model: ResolvedModel
    request: ChatRequest
    # ceil(prompt characters / 3) + max_tokens: what the TPM bucket is charged up front.
    estimated_tokens: int
    estimated_cost: Decimal
    route_reason: str
    # The same at the price of its provider's batch interface (the estimate when it has none).
    batch_estimated_cost: Decimal
    # The request as sent and the schema its answer must meet, hashed: two calls with the
    # same hash would get the same answer (a run that reuses answers takes the first's).
    request_sha256: str = ""

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
        batch_estimated_cost=_lane_price(model, batch=True).cost(prompt, budget),
        request_sha256=request_sha256(request, schema),
    )


def request_sha256(request: ChatRequest, schema: Mapping[str, Any]) -> str:
    """SHA-256 of what decides an answer: the provider, the body as sent (model, messages,
    parameters, response format) and the schema the answer is checked against."""
    return hashlib.sha256(
        dumps({"provider": request.provider, "body": request.body(), "schema": schema})
    ).hexdigest()


def candidates_of(
    table: ProviderTable,
    models: Sequence[str],
    prompt: Sequence[Mapping[str, str]],
    max_tokens: int,
    *,
    batch: bool = False,
) -> list[Candidate]:
    """The router's view of ``models``: speed tier and estimated cost of this prompt (with
    ``batch``, at the price of each one's provider batch interface, if it has one)."""
    tokens = estimate_prompt_tokens(prompt)
    return [
        Candidate(
            name,
            table.model(name).speed,
            _lane_price(table.model(name), batch=batch).cost(
                tokens, table.model(name).max_tokens(max_tokens)
            ),
        )
        for name in models
    ]


def _lane_price(model: ResolvedModel, *, batch: bool) -> ModelPrice:
    """``model``'s price, at its provider's batch discount when ``batch`` and it has one."""
    interface = model.provider.batch
    return interface.price(model.price) if batch and interface is not None else model.price


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
