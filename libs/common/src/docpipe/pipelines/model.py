"""Pipelines as data: ordered steps, each with its prompt version, models and output schema.

A pipeline is known by its key ``<name>:v<version>``; a run stores that key and the hash of
the definition it started with (:attr:`Pipeline.definition_hash`), so a running document
keeps the definition it started with while a new version is rolled out.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import cached_property
from typing import Any, Protocol

import jsonschema

from docpipe.errors import DocpipeError, InvalidRequestError
from docpipe.evaluation.comparators import ComparatorError, Node, field_tree, parse_overrides
from docpipe.pipelines.poor_extraction import DEFAULT_POOR_EXTRACTION_SHARE
from docpipe.pipelines.review import (
    PIPELINE_RULES,
    Reason,
    ReviewRule,
    RuleError,
    parse_rules,
    rule_reasons,
)

__all__ = [
    "NAME_PATTERN",
    "REVIEW_RULES",
    "CompareError",
    "JSONSchema",
    "Pipeline",
    "PipelineError",
    "ReviewRuleError",
    "Step",
    "StepInput",
]

JSONSchema = Mapping[str, Any]

# Names end up in keys, call logs, metrics labels and file names: keep them plain. The
# pattern as OpenAPI (ECMA-262) writes it; Python's "$" would also match before a newline.
NAME_PATTERN = "^[a-z][a-z0-9_]{0,62}$"
_NAME = re.compile(NAME_PATTERN.removesuffix("$") + r"\Z")
MAX_STEP_ATTEMPTS = 50
# Pipeline-level rules (``review_if``): each is checked after every step, on that step's
# output. unsupported_evidence: a value's quote was not found in the document, or does not
# hold the value (the evidence a step records with docpipe.pipelines.evidence says
# "supported": false); value_not_in_quote: only the second.
# poor_extraction: most of the document's pages could not be read, or a step that records
# evidence found no value at all (docpipe.pipelines.poor_extraction).
REVIEW_RULES = PIPELINE_RULES


class PipelineError(DocpipeError):
    """A pipeline definition is wrong; the message says where and what."""


class ReviewRuleError(PipelineError):
    """A step's review rule is wrong; ``index`` is its place in the step's list."""

    def __init__(self, message: str, index: int | None) -> None:
        super().__init__(message)
        self.index = index


class CompareError(PipelineError):
    """A step's comparator override is wrong; ``path`` is the override's field path."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class StepInput(Protocol):
    """What a step may read (the document, earlier steps' outputs) and do (ask the step's
    model, memoised: a retried step gets the answers of calls that already finished from the
    log, and only the others are sent again).

    ``document`` is the document's text: a PDF's or DOCX's as the ``extract_text`` step
    extracted it. ``page_starts``: offset in ``document`` where each page starts ((0,) for
    plain text).
    """

    @property
    def document(self) -> str: ...

    @property
    def page_starts(self) -> tuple[int, ...]: ...

    @property
    def outputs(self) -> Mapping[str, Any]: ...

    def ask(self, call_key: str, user: str, schema: JSONSchema) -> dict[str, Any]:
        """The answer to ``user`` under the step's instructions, valid against ``schema``;
        ``call_key`` names the call within the step (the memo is per key)."""
        ...

    def ask_all(
        self, requests: Sequence[tuple[str, str, JSONSchema]], *, concurrency: int | None = None
    ) -> list[dict[str, Any]]:
        """``ask`` for each ``(call_key, user, schema)``, several at once (at most
        ``concurrency``, and never more than the worker allows); answers in request order."""
        ...


@dataclass(frozen=True)
class Step:
    """One unit of work that may fail alone: its calls are memoised, its output is saved.

    ``execute`` gets a :class:`StepInput` and returns the step's output, which must satisfy
    ``output_schema``. A step that asks a model names it (``model``, and a ``fallback_model``
    tried when the answer stays outside its schema); ``instructions`` are its system prompt.
    ``max_attempts`` and ``budget_usd`` bound what the step may retry and spend.
    ``review`` asks for a person after the step: ``"always"`` or rules on its output
    (docpipe.pipelines.review); the run then pauses in ``needs_review`` after this step.
    ``compare`` overrides how an evaluation compares the step's output field by field
    (docpipe.evaluation.comparators); it is checked here against the output schema and is
    no part of the definition hash: it changes how runs are scored, not what they do.
    """

    name: str
    execute: Callable[[StepInput], dict[str, Any]]
    output_schema: JSONSchema
    instructions: str = ""
    prompt_version: str = ""  # default: "<name>@v1"
    model: str | None = None
    fallback_model: str | None = None
    max_attempts: int | None = None  # default: DOCPIPE_MAX_STEP_ATTEMPTS
    budget_usd: Decimal | None = None
    # The output budget of each call (max_tokens); None: DOCPIPE_DEFAULT_MAX_TOKENS.
    max_tokens: int | None = None
    # Models the router may choose from by the run's priority and budget, in the author's
    # order of preference; empty: ``model`` alone.
    candidates: tuple[str, ...] = ()
    # The schemas its calls ask the model to answer in (checked for strict json_schema mode
    # when the pipeline is registered); a file-defined step's is its output schema.
    answer_schemas: tuple[JSONSchema, ...] = ()
    # What defines the step besides the above, for the definition hash and for display (a
    # step from a pipeline file: its kind, prompt template, ...). None: the execute
    # function's source code stands for it.
    spec: Mapping[str, Any] | None = field(default=None, compare=False)
    # "always", or a list of rules (docpipe.pipelines.review); parsed into ``review_rules``.
    review: str | Sequence[str | Mapping[str, Any]] | None = None
    review_rules: tuple[ReviewRule, ...] = field(init=False, repr=False, compare=False)
    compare: Mapping[str, Any] | None = field(default=None, compare=False)
    comparison: Node = field(init=False, repr=False, compare=False)
    # Where the step's evidence records point: a JSON Pointer into its output, ``*`` for any
    # one key or index ("/fields/*"). The exports give evidence columns to those values
    # alone; None: to every value of a step that records evidence. No part of the
    # definition hash either: it says how results are shown, not what the step does.
    evidence_at: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = f"step {self.name!r}"
        if not _NAME.match(self.name):
            raise PipelineError(f"{where}: a step name is 1-63 characters of a-z, 0-9 and _")
        if not self.prompt_version:
            object.__setattr__(self, "prompt_version", f"{self.name}@v1")
        if self.fallback_model is not None and self.model is None:
            raise PipelineError(f"{where}: a fallback_model needs a model")
        if self.max_attempts is not None and not 1 <= self.max_attempts <= MAX_STEP_ATTEMPTS:
            raise PipelineError(f"{where}: max_attempts must be 1-{MAX_STEP_ATTEMPTS}")
        if self.budget_usd is not None and self.budget_usd <= 0:
            raise PipelineError(f"{where}: budget_usd must be positive")
        check_json_schema(self.output_schema, where=f"{where}: output_schema")
        if self.evidence_at is not None and not (
            self.evidence_at.startswith("/")
            and "evidence" in self.output_schema.get("properties", {})
        ):
            raise PipelineError(
                f'{where}: evidence_at is a JSON Pointer ("/fields/*") into the output of a '
                'step that records evidence (an "evidence" list in its output schema)'
            )
        try:
            rules = parse_rules(self.review, self.output_schema)
        except RuleError as exc:
            raise ReviewRuleError(f"{where}: {exc}", exc.index) from None
        object.__setattr__(self, "review_rules", rules)
        try:
            tree = field_tree(self.output_schema, _scored(self.output_schema, self.compare))
        except ComparatorError as exc:
            raise CompareError(f"{where}: {exc}", exc.path) from None
        object.__setattr__(self, "comparison", tree)

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
        """The models the step may ask, in the order they are tried."""
        return tuple(m for m in (self.model, self.fallback_model) if m is not None)

    def definition(self) -> dict[str, Any]:
        """Everything that defines the step, as JSON (its review rules only when it has
        some: steps without keep the hash they had before rules existed)."""
        rules = {"review": [r.as_data() for r in self.review_rules]} if self.review_rules else {}
        return rules | {
            "name": self.name,
            "prompt_version": self.prompt_version,
            "instructions": self.instructions,
            "model": self.model,
            "fallback_model": self.fallback_model,
            "max_attempts": self.max_attempts,
            "budget_usd": None if self.budget_usd is None else str(self.budget_usd),
            "max_tokens": self.max_tokens,
            "candidates": list(self.candidates),
            "answer_schemas": list(self.answer_schemas),
            "output_schema": self.output_schema,
            "spec": dict(self.spec) if self.spec is not None else {"code": _code_of(self)},
        }


def _scored(schema: JSONSchema, compare: Any) -> dict[str, dict[str, Any]]:
    """The step's overrides; a step that records evidence has it scored as evidence, not
    compared as a value (unless the step says otherwise)."""
    overrides = parse_overrides(compare)
    if "evidence" in schema.get("properties", {}):
        overrides.setdefault("evidence", {"compare": "none"})
    return overrides


def _code_of(step: Step) -> str:
    try:
        return inspect.getsource(step.execute)
    except (OSError, TypeError):  # no source at hand (a builtin, a lambda made at runtime)
        return getattr(step.execute, "__qualname__", repr(step.execute))


def check_json_schema(schema: JSONSchema, *, where: str) -> None:
    """Raise PipelineError unless ``schema`` is a valid JSON Schema for an object."""
    try:
        jsonschema.validators.validator_for(schema).check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        path = "/".join(str(p) for p in exc.absolute_path)
        raise PipelineError(
            f"{where}: not a valid JSON Schema ({path or '/'}: {exc.message})"
        ) from None
    if schema.get("type") != "object":
        raise PipelineError(f'{where}: must describe a JSON object ("type": "object")')


@dataclass(frozen=True)
class Pipeline:
    """Named, versioned, ordered steps; ``source`` says where the definition came from.

    ``review_if`` names rules (:data:`REVIEW_RULES`) checked after every step on its output,
    as if each step listed them: when one holds, the run pauses ``needs_review`` after it.
    """

    name: str
    version: int
    steps: tuple[Step, ...]
    source: str = field(default="python", compare=False)
    review_if: tuple[str, ...] = ()
    _by_name: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise PipelineError(
                f"pipeline {self.name!r}: a name is 1-63 characters of a-z, 0-9 and _"
            )
        if not 1 <= self.version <= 10_000:
            raise PipelineError(f"pipeline {self.name}: version must be 1-10000")
        names = [s.name for s in self.steps]
        if not names:
            raise PipelineError(f"pipeline {self.key}: it has no steps")
        if duplicate := next((n for n in names if names.count(n) > 1), None):
            raise PipelineError(f"pipeline {self.key}: two steps are named {duplicate!r}")
        object.__setattr__(self, "_by_name", {n: i for i, n in enumerate(names)})
        self._check_review_rules()

    def _check_review_rules(self) -> None:
        object.__setattr__(self, "review_if", tuple(self.review_if))
        for rule in self.review_if:
            if rule not in REVIEW_RULES:
                raise PipelineError(
                    f"pipeline {self.key}: unknown review_if rule {rule!r} "
                    f"(known: {', '.join(sorted(REVIEW_RULES))})"
                )
        records = any("evidence" in s.output_schema.get("properties", {}) for s in self.steps)
        for rule in ("unsupported_evidence", "value_not_in_quote"):
            if rule in self.review_if and not records:
                raise PipelineError(
                    f"pipeline {self.key}: review_if {rule} needs a step that records "
                    'evidence (an "evidence" list in its output schema)'
                )

    @property
    def key(self) -> str:
        return f"{self.name}:v{self.version}"

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]

    @cached_property
    def definition_hash(self) -> str:
        """SHA-256 of everything that defines the pipeline: a run keeps the one it started
        with, and the same key with another hash is another definition."""
        steps = [s.definition() for s in self.steps]
        definition: dict[str, Any] = {"key": self.key, "steps": steps}
        if self.review_if:  # absent when empty: pipelines without rules keep their hash
            definition["review_if"] = list(self.review_if)
        canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def review_reasons(
        self,
        step: str,
        output: Mapping[str, Any],
        *,
        sample_at: float,
        poor_extraction_share: float = DEFAULT_POOR_EXTRACTION_SHARE,
    ) -> list[Reason]:
        """Why the run pauses for a person after ``step`` gave ``output``: the step's own
        rules, then the pipeline's (empty: it goes on). ``sample_at`` is the document's
        :func:`~docpipe.pipelines.review.sample_point` for this step;
        ``poor_extraction_share`` is DOCPIPE_POOR_EXTRACTION_SHARE."""
        return rule_reasons(self.rules_after(step, poor_extraction_share), output, sample_at)

    def rules_after(
        self, step: str, poor_extraction_share: float = DEFAULT_POOR_EXTRACTION_SHARE
    ) -> tuple[ReviewRule, ...]:
        """The rules checked on ``step``'s output: its own, then the pipeline's."""
        rules = self.step(step).review_rules
        shared = tuple(ReviewRule(r) for r in self.review_if if ReviewRule(r) not in rules)
        # The rule's threshold is a setting, not part of the definition (nor of its hash).
        return tuple(
            replace(r, limit=poor_extraction_share) if r.kind == "poor_extraction" else r
            for r in (*rules, *shared)
        )

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
