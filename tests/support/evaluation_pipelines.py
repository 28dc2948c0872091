"""Versions of document_extract for the evaluation tests, imported by the tests and loaded by
their workers (DOCPIPE_PIPELINE_MODULES=tests.support.evaluation_pipelines):

- v2: extract_fields under a worse prompt (its own prompt version, which the fake provider
  is told to get wrong);
- v3: only summarize's prompt changed.
"""

from __future__ import annotations

from dataclasses import replace

from docpipe.pipelines import Pipeline, Step
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT

WORSE_FIELDS = "extract_fields@worse"
NEW_SUMMARY = "summarize@v2"


def _version(version: int, **changed: Step) -> Pipeline:
    steps = tuple(
        changed.get(s.name, s) for s in DOCUMENT_EXTRACT.steps if s.name != "extract_text"
    )
    return replace(DOCUMENT_EXTRACT, version=version, steps=steps, source="tests")


_FIELDS = DOCUMENT_EXTRACT.step("extract_fields")
_SUMMARY = DOCUMENT_EXTRACT.step("summarize")
PIPELINES = [
    _version(
        2,
        extract_fields=replace(
            _FIELDS,
            prompt_version=WORSE_FIELDS,
            instructions=_FIELDS.instructions + " Be quick about it.",
        ),
    ),
    _version(
        3,
        summarize=replace(
            _SUMMARY,
            prompt_version=NEW_SUMMARY,
            instructions=_SUMMARY.instructions + " Mention the governing law first.",
        ),
    ),
]
