"""Pipelines as files: the common shapes without code, checked completely when loaded.

A file (YAML) names the pipeline, its version and its steps; ``pipeline-file.schema.json``
beside this module is the published JSON Schema of the format. Three kinds of step:

- ``ask``: one call, usually over the whole document (``{{ document }}``);
- ``map``: one call per item of a list in an earlier step's output (``over``), at most
  ``concurrency`` at once, each memoised on its own, gathered in order as ``{"items": [...]}``;
  the list's schema must bound it (``maxItems``, at most the step's ``max_items``);
- ``reduce``: one call over earlier outputs (a summary).

A step may say which of its answer's values carry quotes (``evidence: <property>``, a
mapping of names to ``{value, quote}`` objects or a list of them): docpipe then locates each
quote in the document as ``document_extract`` does and adds the records to the step's output
as its ``evidence`` list, so ``review: [unsupported_evidence]`` works on it. A step may ask
for a person with ``review:`` (docpipe.pipelines.review), and say how an evaluation compares
its output with ``compare:`` (docpipe.evaluation.comparators).

Loading checks the file against the published schema, every output schema against the
JSON Schema meta-schema, every template variable and ``over`` against the earlier steps and
their output schemas, every review rule against the step's output, and refuses duplicate
keys and YAML anchors. Every error names the file and line:
``pipelines/nda.yaml:14: step 'risks': ...``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from functools import cache
from importlib.resources import files
from typing import Any

import jsonschema
import yaml

from docpipe.errors import InvalidOutputError
from docpipe.pipelines.evidence import EVIDENCE_SCHEMA, quoted_values
from docpipe.pipelines.model import (
    CompareError,
    JSONSchema,
    Pipeline,
    PipelineError,
    ReviewRuleError,
    Step,
    StepInput,
)
from docpipe.pipelines.templates import Template, TemplateError, lookup, parse_path, schema_at

__all__ = ["MAX_FILE_BYTES", "file_schema", "load_pipeline_file"]

MAX_FILE_BYTES = 1_000_000
DEFAULT_CONCURRENCY = 4
DEFAULT_MAX_ITEMS = 100

_Lines = dict[tuple[str | int, ...], int]
# What defines a step of a file besides what every Step has (for its definition hash).
_SPEC_KEYS = ("kind", "prompt", "over", "concurrency", "max_items", "evidence")


@cache
def file_schema() -> dict[str, Any]:
    """The published JSON Schema of pipeline files."""
    text = files("docpipe.pipelines").joinpath("pipeline-file.schema.json").read_text("utf-8")
    return dict(json.loads(text))


def load_pipeline_file(text: str, origin: str) -> Pipeline:
    """The pipeline a file defines; PipelineError ``origin:line: what is wrong`` otherwise."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise PipelineError(f"{origin}: larger than {MAX_FILE_BYTES} bytes")
    data, lines = _parse(text, origin)

    def fail(path: tuple[str | int, ...], message: str) -> PipelineError:
        return PipelineError(f"{origin}:{_line_of(lines, path)}: {message}")

    validator = jsonschema.Draft202012Validator(file_schema())
    if (error := jsonschema.exceptions.best_match(validator.iter_errors(data))) is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the file"
        raise fail(tuple(error.absolute_path), f"{where}: {error.message}")
    defaults = data.get("defaults", {})
    steps: list[Step] = []
    for index, spec in enumerate(data["steps"]):
        path: tuple[str | int, ...] = ("steps", index)
        try:
            steps.append(_step(spec, defaults, data["version"], steps, lines, path))
        except _AtPath as exc:
            raise fail(exc.path, f"step {spec['name']!r}: {exc}") from None
        except (PipelineError, TemplateError) as exc:
            raise fail(path, f"step {spec['name']!r}: {exc}") from None
    try:
        return Pipeline(
            data["name"],
            data["version"],
            tuple(steps),
            source=origin,
            review_if=tuple(data.get("review_if", ())),
        )
    except PipelineError as exc:
        raise fail((), str(exc)) from None


class _AtPath(Exception):
    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


def _step(
    spec: Mapping[str, Any],
    defaults: Mapping[str, Any],
    version: int,
    earlier: list[Step],
    lines: _Lines,
    path: tuple[str | int, ...],
) -> Step:
    kind = spec["kind"]
    model = spec.get("model", defaults.get("model"))
    if model is None:
        raise _AtPath(path, "no model: set model, or defaults.model for every step")
    readable: dict[str, Mapping[str, Any] | None] = {
        "document": {"type": "string"},
        "outputs": {
            "type": "object",
            "properties": {s.name: s.output_schema for s in earlier},
        },
    }
    if kind in ("map", "reduce") and not earlier:
        raise _AtPath(path, f"a {kind} step reads earlier outputs: it cannot come first")
    item_schema: Mapping[str, Any] | None = None
    if kind == "map":
        over = _checked_path(spec["over"], readable, (*path, "over"))
        listed = schema_at(readable["outputs"] or {}, over[1:], where=spec["over"])
        if listed and listed.get("type") != "array" and "items" not in listed:
            raise _AtPath((*path, "over"), f"{spec['over']} is not a list in its schema")
        item_schema = listed.get("items", {}) if listed else {}
        readable |= {"item": item_schema or None, "index": None}
        _check_fan_out_bound(spec, listed, (*path, "over"))
    template = Template.parse(spec["prompt"])
    try:
        template.check(readable)
    except TemplateError as exc:
        raise _AtPath((*path, "prompt"), str(exc)) from None
    if kind == "reduce" and not any(p[0] == "outputs" for p in template.paths):
        raise _AtPath((*path, "prompt"), "a reduce step's prompt reads earlier outputs")
    answer_schema: JSONSchema = spec["output_schema"]
    quoted = spec.get("evidence")
    if quoted is not None:
        _check_quoted(answer_schema, quoted, (*path, "evidence"))
    mapped = kind == "map"
    output_schema = _gathered(answer_schema) if mapped else answer_schema
    if quoted is not None:
        output_schema = _with_evidence(output_schema)
    budget = spec.get("budget_usd", defaults.get("budget_usd"))
    try:
        return Step(
            name=spec["name"],
            execute=_map(spec, template, answer_schema)
            if mapped
            else _ask(template, answer_schema, quoted),
            output_schema=output_schema,
            instructions=spec.get("instructions", ""),
            prompt_version=spec.get("prompt_version", f"{spec['name']}@v{version}"),
            model=model,
            fallback_model=spec.get("fallback_model", defaults.get("fallback_model")),
            max_attempts=spec.get("max_attempts", defaults.get("max_attempts")),
            budget_usd=None if budget is None else Decimal(str(budget)),
            answer_schemas=(answer_schema,),
            spec={k: v for k, v in spec.items() if k in _SPEC_KEYS},
            review=spec.get("review"),
            compare=spec.get("compare"),
            evidence_at=_evidence_at(quoted, mapped),
        )
    except CompareError as exc:
        at = (*path, "compare", exc.path) if exc.path else (*path, "compare")
        raise _AtPath(at, str(exc).removeprefix(f"step {spec['name']!r}: ")) from None
    except ReviewRuleError as exc:
        at = (*path, "review") if exc.index is None else (*path, "review", exc.index)
        raise _AtPath(at, str(exc).removeprefix(f"step {spec['name']!r}: ")) from None
    except PipelineError as exc:
        raise _AtPath((*path, "output_schema"), str(exc)) from None


def _check_quoted(schema: JSONSchema, prop: str, at: tuple[str | int, ...]) -> None:
    """``prop`` must hold ``{value, quote}`` objects: a mapping of them or a list."""
    held = schema.get("properties", {}).get(prop)
    if held is None:
        raise _AtPath(at, f"evidence: the output schema has no property {prop!r}")
    if held.get("type") == "array":
        items = [held.get("items", {})]
    else:
        items = [*held.get("properties", {}).values()]
        if isinstance(extra := held.get("additionalProperties"), Mapping):
            items.append(extra)
    shapes = [i.get("properties", {}) for i in items]
    if not items or any(
        "value" not in s or s.get("quote", {}).get("type") != "string" for s in shapes
    ):
        raise _AtPath(
            at,
            f"evidence: {prop} must hold objects {{value, quote}} (a mapping of "
            "them or a list) whose quote is a string",
        )


def _evidence_at(quoted: str | None, mapped: bool) -> str | None:
    """Where the step's evidence records point (docpipe.pipelines.evidence.quoted_values):
    each ``value`` under the quoted property, of each item when the step maps."""
    if quoted is None:
        return None
    return f"/items/*/{quoted}/*/value" if mapped else f"/{quoted}/*/value"


def _with_evidence(output_schema: JSONSchema) -> JSONSchema:
    """The step's output: its answer with the evidence docpipe located for it (not
    required: an output a reviewer wrote whole has values no quote was read for)."""
    properties = dict(output_schema.get("properties", {}))
    properties["evidence"] = {"type": "array", "items": EVIDENCE_SCHEMA}
    return {**output_schema, "properties": properties}


def _sections(outputs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The sections an earlier step located (``document_extract``'s shape), if any."""
    for output in outputs.values():
        found = output.get("sections") if isinstance(output, Mapping) else None
        if isinstance(found, list) and all(
            isinstance(s, Mapping) and isinstance(s.get("start"), int) for s in found
        ):
            return found
    return []


def _locate(step: StepInput, answer: Mapping[str, Any], prop: str, prefix: str = "") -> list[Any]:
    return quoted_values(
        answer,
        prop,
        document=step.document,
        page_starts=step.page_starts,
        sections=_sections(step.outputs),
        prefix=prefix,
    )


def _check_fan_out_bound(
    spec: Mapping[str, Any], listed: Mapping[str, Any] | None, at: tuple[str | int, ...]
) -> None:
    """Each item of a map step's list is a paid call: the list's schema must bound it
    (maxItems, which strict output mode also tells the model), within the step's max_items,
    so a longer list fails the step that wrote it, not after a fan-out is under way."""
    stated = (listed or {}).get("maxItems")
    max_items = int(spec.get("max_items", DEFAULT_MAX_ITEMS))
    if not isinstance(stated, int):
        raise _AtPath(
            at,
            f"{spec['over']} has no maxItems in its schema: bound the list a "
            f"map step fans out over (each item is a paid call)",
        )
    if stated > max_items:
        raise _AtPath(
            at,
            f"{spec['over']} may hold {stated} items (maxItems), more than "
            f"this step maps (max_items {max_items})",
        )


def _checked_path(
    text: str, readable: Mapping[str, Mapping[str, Any] | None], at: tuple[str | int, ...]
) -> tuple[str, ...]:
    try:
        path = parse_path(text)
        Template(text, (path,)).check(readable)
    except TemplateError as exc:
        raise _AtPath(at, str(exc)) from None
    return path


def _gathered(answer_schema: JSONSchema) -> JSONSchema:
    """A map step's output: its answers in the order of its list."""
    return {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": dict(answer_schema)}},
    }


def _ask(template: Template, schema: JSONSchema, quoted: str | None) -> Any:
    def execute(step: StepInput) -> dict[str, Any]:
        user = template.render({"document": step.document, "outputs": step.outputs})
        answer = step.ask("prompt", user, schema)
        if quoted is None:
            return answer
        return {**answer, "evidence": _locate(step, answer, quoted)}

    return execute


def _map(spec: Mapping[str, Any], template: Template, schema: JSONSchema) -> Any:
    over = parse_path(spec["over"])
    concurrency = int(spec.get("concurrency", DEFAULT_CONCURRENCY))
    max_items = int(spec.get("max_items", DEFAULT_MAX_ITEMS))
    quoted: str | None = spec.get("evidence")

    def execute(step: StepInput) -> dict[str, Any]:
        items = lookup({"outputs": step.outputs}, over)
        if not isinstance(items, list):
            raise InvalidOutputError(f"{spec['over']} is not a list: nothing to map over")
        if len(items) > max_items:
            raise InvalidOutputError(
                f"{spec['over']} lists {len(items)} items; this step's max_items is {max_items}"
            )
        values = {"document": step.document, "outputs": step.outputs}
        requests = [
            (f"item:{i}", template.render({**values, "item": item, "index": i}), schema)
            for i, item in enumerate(items)
        ]
        answers = step.ask_all(requests, concurrency=concurrency)
        if quoted is None:
            return {"items": answers}
        evidence = [
            r for i, a in enumerate(answers) for r in _locate(step, a, quoted, f"/items/{i}")
        ]
        return {"items": answers, "evidence": evidence}

    return execute


def _parse(text: str, origin: str) -> tuple[Any, _Lines]:
    """The file's data, and the line of every key and item in it."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise PipelineError(f"{origin}:1: the file is empty")
        lines: _Lines = {}
        _walk(node, (), lines, set(), origin)
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise PipelineError(f"{origin}:{line}: not valid YAML ({exc.problem})") from None
    except yaml.YAMLError as exc:
        raise PipelineError(f"{origin}: not valid YAML ({exc})") from None
    finally:
        loader.dispose()


def _walk(
    node: yaml.Node, path: tuple[str | int, ...], lines: _Lines, seen: set[int], origin: str
) -> None:
    if id(node) in seen:  # an alias: refused, it would let a small file expand without bound
        raise PipelineError(
            f"{origin}:{node.start_mark.line + 1}: YAML anchors and aliases are not allowed"
        )
    seen.add(id(node))
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        keys: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in keys:
                raise PipelineError(
                    f"{origin}:{line}: duplicate key {key!r} (first on line {keys[key]})"
                )
            keys[key] = line
            _walk(value_node, (*path, key), lines, seen, origin)
            lines[(*path, key)] = line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, seen, origin)


def _line_of(lines: _Lines, path: tuple[str | int, ...]) -> int:
    """The line of ``path``, or of the nearest enclosing key that has one."""
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)
