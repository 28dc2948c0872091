"""Pipelines as data: ordered steps, each with its prompt version, models and output schema.

A pipeline is registered under ``<name>:v<version>``; a run stores that key, so a running
document keeps the definition it started with while a new version is rolled out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from docpipe.errors import InvalidRequestError

if TYPE_CHECKING:
    from docpipe.calls import StepContext

__all__ = ["Pipeline", "Step", "get_pipeline", "pipelines", "register"]

JSONSchema = Mapping[str, Any]


@dataclass(frozen=True)
class Step:
    """One unit of work that may fail alone: its calls are memoised, its output is saved."""

    name: str
    prompt_version: str
    model: str
    instructions: str
    output_schema: JSONSchema
    execute: Callable[[StepContext], dict[str, Any]]
    # Tried when the primary model's answer stays outside its schema (seed 004).
    fallback_model: str | None = None

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


_REGISTRY: dict[str, Pipeline] = {}


def register(pipeline: Pipeline) -> Pipeline:
    if pipeline.key in _REGISTRY:
        raise ValueError(f"pipeline {pipeline.key} is registered twice")
    _REGISTRY[pipeline.key] = pipeline
    return pipeline


def pipelines() -> dict[str, Pipeline]:
    """Every registered pipeline by key (importing docpipe.document_extract registers v1)."""
    import docpipe.document_extract  # noqa: F401  (registration is the import's side effect)

    return dict(_REGISTRY)


def get_pipeline(key: str) -> Pipeline:
    known = pipelines()
    try:
        return known[key]
    except KeyError:
        raise InvalidRequestError(
            f"unknown pipeline {key!r} (known: {', '.join(sorted(known))})"
        ) from None
