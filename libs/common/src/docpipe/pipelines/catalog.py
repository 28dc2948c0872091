"""The pipelines a process knows, by key, registered explicitly from four places:

- built in: ``document_extract:v1`` (Python) and the files shipped in ``pipelines/builtin``;
- installed Python packages: the entry point group ``docpipe.pipelines``, each entry naming
  a :class:`~docpipe.pipelines.Pipeline` or a sequence of them (``mypkg.flows:INVOICE``);
- ``DOCPIPE_PIPELINE_MODULES``: ``module`` (its ``PIPELINES``) or ``module:attribute``;
- ``DOCPIPE_PIPELINES_DIR``: pipeline files (``*.yaml``), see docpipe.pipelines.files.

Each gets docpipe's ``extract_text`` as its first step (docpipe.pipelines.text_extraction).
Loading checks everything once, at start-up: a broken definition, a key defined twice, a
model without a price stop the process with a message saying where, and a run never starts
on a pipeline that did not load.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from importlib.metadata import entry_points
from importlib.resources import files
from pathlib import Path
from typing import Any

from docpipe.errors import InvalidRequestError
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.files import load_pipeline_file
from docpipe.pipelines.model import Pipeline, PipelineError
from docpipe.pipelines.structured_output import StrictSchemaError, strict_schema
from docpipe.pipelines.text_extraction import with_text_extraction
from docpipe.settings import Settings, get_settings

__all__ = [
    "ENTRY_POINT_GROUP",
    "Catalog",
    "catalog",
    "check_answer_schemas",
    "check_models",
    "get_pipeline",
    "load_catalog",
    "pipeline_files",
    "pipelines",
]

ENTRY_POINT_GROUP = "docpipe.pipelines"
_FILE_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Catalog:
    """Every pipeline this process may run, by key."""

    by_key: Mapping[str, Pipeline]

    def get(self, key: str) -> Pipeline:
        try:
            return self.by_key[key]
        except KeyError:
            raise InvalidRequestError(
                f"unknown pipeline {key!r} (known: {', '.join(sorted(self.by_key))})"
            ) from None

    def latest(self, name: str) -> Pipeline:
        """The highest version of the pipeline ``name``; InvalidRequestError if none."""
        versions = [p for p in self.by_key.values() if p.name == name]
        if not versions:
            known = sorted({p.name for p in self.by_key.values()})
            raise InvalidRequestError(f"unknown pipeline {name!r} (known: {', '.join(known)})")
        return max(versions, key=lambda p: p.version)

    def __iter__(self) -> Iterator[Pipeline]:
        return iter(self.by_key[key] for key in sorted(self.by_key))

    @property
    def step_names(self) -> list[str]:
        """Every step name of every pipeline, sorted (what a request naming a step may say)."""
        return sorted({name for pipeline in self.by_key.values() for name in pipeline.step_names})

    def check_step_name(self, step: str, *, field: str) -> None:
        """InvalidRequestError when no pipeline here has ``step`` (the OpenAPI document
        lists the names; one of another pipeline than a run's is the run's to refuse)."""
        if step not in self.step_names:
            raise InvalidRequestError(
                f"{field}: no pipeline here has a step {step!r} "
                f"(steps: {', '.join(self.step_names)})"
            )


def load_catalog(settings: Settings) -> Catalog:
    """Load and check every pipeline the settings name; PipelineError says what is wrong."""
    by_key: dict[str, Pipeline] = {}
    for loaded in _all_sources(settings):
        # Every pipeline reads the document's text, which extract_text makes of the upload.
        pipeline = with_text_extraction(loaded)
        if (known := by_key.get(pipeline.key)) is not None:
            raise PipelineError(
                f"pipeline {pipeline.key} is defined twice: by {known.source} and by "
                f"{pipeline.source} (give one of them another name or version)"
            )
        check_models(pipeline, settings.provider_table.models)
        check_answer_schemas(pipeline)
        by_key[pipeline.key] = pipeline
    return Catalog(by_key)


def _all_sources(settings: Settings) -> Iterator[Pipeline]:
    yield DOCUMENT_EXTRACT
    builtin = files("docpipe.pipelines").joinpath("builtin")
    for entry in sorted(builtin.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(_FILE_SUFFIXES):
            yield load_pipeline_file(entry.read_text(encoding="utf-8"), f"builtin/{entry.name}")
    for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        source = f"entry point {entry_point.name} = {entry_point.value}"
        yield from _pipelines_in(_load_reference(entry_point.load, source), source)
    for reference in settings.pipeline_modules:
        module, _, attribute = reference.partition(":")
        source = f"DOCPIPE_PIPELINE_MODULES {reference}"
        value = _load_reference(
            partial(_import_attribute, module, attribute or "PIPELINES"), source
        )
        yield from _pipelines_in(value, source)
    if settings.pipelines_dir is not None:
        yield from pipeline_files(settings.pipelines_dir)


def _load_reference(load: Any, source: str) -> Any:
    try:
        return load()
    except PipelineError as exc:
        raise PipelineError(f"{source}: {exc}") from None
    except (ImportError, AttributeError) as exc:
        raise PipelineError(f"{source}: cannot load it ({exc})") from None


def _import_attribute(module: str, attribute: str) -> Any:
    return getattr(importlib.import_module(module), attribute)


def _pipelines_in(value: Any, source: str) -> Iterator[Pipeline]:
    found = [value] if isinstance(value, Pipeline) else value
    if not isinstance(found, Iterable) or not all(isinstance(p, Pipeline) for p in found):
        raise PipelineError(f"{source}: names {type(value).__name__}, not a Pipeline or a list")
    for pipeline in found:
        yield _with_source(pipeline, source)


def _with_source(pipeline: Pipeline, source: str) -> Pipeline:
    return replace(pipeline, source=source)


def pipeline_files(folder: Path) -> Iterator[Pipeline]:
    """The pipelines of the files in ``folder`` (DOCPIPE_PIPELINES_DIR), each checked as it
    is read: PipelineError names the first broken file and its line."""
    if not folder.is_dir():
        raise PipelineError(f"DOCPIPE_PIPELINES_DIR={folder} is not a directory")
    for path in sorted(p for p in folder.iterdir() if p.suffix in _FILE_SUFFIXES):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PipelineError(f"{path}: cannot read it ({exc})") from None
        yield load_pipeline_file(text, str(path))


def check_models(pipeline: Pipeline, known: Collection[str]) -> None:
    """Every model a step may ask is one of ``known`` (the models on a provider, with a
    price); PipelineError naming the step and the model otherwise."""
    for step in pipeline.steps:
        for model in (*step.models, *step.candidates):
            if model not in known:
                raise PipelineError(
                    f"{pipeline.source}: step {step.name!r} of {pipeline.key} asks model "
                    f"{model!r}, which is on no provider with a price (DOCPIPE_PROVIDERS or "
                    f"DOCPIPE_MODEL_PRICES; known: {', '.join(sorted(known))})"
                )


def check_answer_schemas(pipeline: Pipeline) -> None:
    """Refuse a pipeline a step of which asks for an answer schema that strict json_schema
    mode cannot take (naming the pipeline, the step and the place)."""
    for step in pipeline.steps:
        for schema in step.answer_schemas:
            try:
                strict_schema(schema)
            except StrictSchemaError as exc:
                raise PipelineError(
                    f"{pipeline.source}: step {step.name!r} of {pipeline.key}: its answer "
                    f"schema cannot be sent in json_schema (strict) mode: {exc}"
                ) from None


_loaded: tuple[Settings, Catalog] | None = None


def catalog() -> Catalog:
    """The pipelines of this process' settings (loaded once per settings object)."""
    global _loaded
    settings = get_settings()
    if _loaded is None or _loaded[0] is not settings:
        _loaded = (settings, load_catalog(settings))
    return _loaded[1]


def get_pipeline(key: str) -> Pipeline:
    """The pipeline ``key`` of this process; InvalidRequestError naming the known ones."""
    return catalog().get(key)


def pipelines() -> dict[str, Pipeline]:
    """Every pipeline of this process by key."""
    return dict(catalog().by_key)
