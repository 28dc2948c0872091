"""Pipelines as data: ordered steps, each with its prompt version, models and output schema.

A pipeline is known by its key ``<name>:v<version>``; a run stores that key, so a running
document keeps the definition it started with while a new version is rolled out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from docpipe.errors import InvalidRequestError

__all__ = ["Pipeline", "Step", "StepInput"]

JSONSchema = Mapping[str, Any]


class StepInput(Protocol):
    """What a step may read (the document, earlier steps' outputs) and do (ask a model,
    memoised: a retried step is answered from the log for calls that already finished)."""

    @property
    def document(self) -> str: ...

    @property
    def outputs(self) -> Mapping[str, Any]: ...

    def ask(self, call_key: str, user: str, schema: Mapping[str, Any]) -> dict[str, Any]: ...

    def ask_all(
        self, requests: Sequence[tuple[str, str, Mapping[str, Any]]]
    ) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Step:
    """One unit of work that may fail alone: its calls are memoised, its output is saved."""

    name: str
    prompt_version: str
    model: str
    instructions: str
    output_schema: JSONSchema
    execute: Callable[[StepInput], dict[str, Any]]
    # Tried when the primary model's answer stays outside its schema (seed 004).
    fallback_model: str | None = None
    # The output budget of each call (max_tokens); None: DOCPIPE_DEFAULT_MAX_TOKENS.
    max_tokens: int | None = None
    # Models the router may choose from by the run's priority and budget, in the author's
    # order of preference; empty: ``model`` alone.
    candidates: tuple[str, ...] = ()
    # The schemas its calls ask the model to answer in (checked for strict json_schema mode
    # when the pipeline is registered); a file-defined step's is its output schema.
    answer_schemas: tuple[JSONSchema, ...] = ()

    @property
    def system_prompt(self) -> str:
        # The header lines make every logged prompt self-describing (and let the fake
        # provider answer like the real model would for this step).
        return (
            f"docpipe-step: {self.name}\nprompt-version: {self.prompt_version}\n\n"
            f"{self.instructions}"
        )

    @property
    def models(self) -> tuple[str, ...]:
        return (self.model,) if self.fallback_model is None else (self.model, self.fallback_model)


@dataclass(frozen=True)
class Pipeline:
    name: str
    version: int
    steps: tuple[Step, ...]
    _by_name: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [s.name for s in self.steps]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"pipeline {self.name}: step names must be unique and non-empty")
        object.__setattr__(self, "_by_name", {n: i for i, n in enumerate(names)})

    @property
    def key(self) -> str:
        return f"{self.name}:v{self.version}"

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]

    def step(self, name: str) -> Step:
        try:
            return self.steps[self._by_name[name]]
        except KeyError:
            raise InvalidRequestError(
                f"pipeline {self.key} has no step {name!r} (steps: {', '.join(self.step_names)})"
            ) from None

    def index_of(self, name: str) -> int:
        return self._by_name[self.step(name).name]

    def next_step(self, name: str) -> str | None:
        i = self.index_of(name) + 1
        return self.steps[i].name if i < len(self.steps) else None
