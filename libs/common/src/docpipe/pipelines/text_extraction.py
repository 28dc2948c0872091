"""``extract_text``: the first step of every pipeline, docpipe's own.

It turns the uploaded file into the text the later steps read as ``StepInput.document``
(with ``page_starts``): a PDF's text layer or its pages' OCR, a DOCX's paragraphs and
tables; a text document is its own text. It asks no model. Its code runs in the worker,
which holds what it needs and a pipeline's own code never sees (the file's bytes, the
per-page memo in PostgreSQL): docpipe.worker.text_extraction. The catalog puts it in front
of every pipeline it loads, built-in or the users', so each run's definition (and hash)
includes it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from docpipe.pipelines.model import Pipeline, PipelineError, Step, StepInput

__all__ = [
    "EXTRACTION_SCHEMA",
    "EXTRACT_TEXT",
    "EXTRACT_TEXT_STEP",
    "PAGE_WARNING_SCHEMA",
    "with_text_extraction",
]

EXTRACT_TEXT = "extract_text"

# What extraction noticed on a page: its kind (docpipe.extraction.pages.WARNING_KINDS), the
# 1-based page, the measure that decided it (a confidence, a dpi, a score; null when there
# is none) and a sentence for people.
PAGE_WARNING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "page", "value", "message"],
    "properties": {
        "kind": {"type": "string"},
        "page": {"type": "integer", "minimum": 1},
        "value": {"type": ["number", "null"]},
        "message": {"type": "string"},
    },
    "additionalProperties": False,
}

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "pages", "ocr_pages", "characters", "warnings", "rotated_pages"],
    "properties": {
        "format": {"enum": ["text", "pdf", "docx", "png", "jpeg", "tiff"]},
        "pages": {"type": "integer", "minimum": 1},
        "ocr_pages": {"type": "integer", "minimum": 0},
        "characters": {"type": "integer", "minimum": 0},
        # Mean of the OCRed pages' confidences (0-100); null when no page needed OCR.
        "ocr_confidence": {"type": ["number", "null"]},
        "warnings": {"type": "array", "items": PAGE_WARNING_SCHEMA},
        # The pages found scanned sideways or upside down, and the degrees (clockwise) each
        # was turned to be read upright, from how the PDF shows it (its /Rotate applied).
        "rotated_pages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["page", "degrees"],
                "properties": {
                    "page": {"type": "integer", "minimum": 1},
                    "degrees": {"enum": [90, 180, 270]},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}


def _run_by_the_worker(ctx: StepInput) -> dict[str, Any]:
    raise PipelineError(
        f"{EXTRACT_TEXT} is run by docpipe's worker (docpipe.worker.text_extraction), "
        "never through a StepInput"
    )


EXTRACT_TEXT_STEP = Step(
    name=EXTRACT_TEXT,
    execute=_run_by_the_worker,
    output_schema=EXTRACTION_SCHEMA,
    prompt_version=f"{EXTRACT_TEXT}@v3",
    # What defines the step for the definition hash: a new extractor is a new version.
    # 2: pages read upright, warnings with kind, page and value. 3: images (PNG, JPEG, TIFF).
    spec={"kind": "code", "runs": "docpipe.worker.text_extraction", "version": 3},
)


def with_text_extraction(pipeline: Pipeline) -> Pipeline:
    """``pipeline`` with ``extract_text`` as its first step (PipelineError when one of its
    own steps takes that name)."""
    if EXTRACT_TEXT in pipeline.step_names:
        if pipeline.steps[0] is EXTRACT_TEXT_STEP:
            return pipeline
        raise PipelineError(
            f"{pipeline.source}: pipeline {pipeline.key} has a step named {EXTRACT_TEXT!r}, "
            "which is docpipe's own first step of every pipeline: rename it"
        )
    return replace(pipeline, steps=(EXTRACT_TEXT_STEP, *pipeline.steps))
