"""Pipelines: ordered steps with their prompts, models and output schemas.

This module is all a pipeline author needs (docs: guides/pipelines.md)::

    from docpipe.pipelines import Pipeline, Step, StepInput

A step's code gets a :class:`StepInput`: the document's text (extracted from a PDF or DOCX by
docpipe's first step, ``extract_text``), its page map, the earlier steps' outputs, and
``ask`` / ``ask_all`` for memoised model calls; the database, the limiter and the
settings stay out of its reach. Register a pipeline through the ``docpipe.pipelines`` entry
point of your package or DOCPIPE_PIPELINE_MODULES, or write it as a file in
DOCPIPE_PIPELINES_DIR (docpipe.pipelines.files). The built-in pipelines are
``document_extract:v1`` (contract -> text -> sections -> fields -> summary) and the file
``builtin/nda_review.yaml``.

Inside docpipe: may import the foundation only (settings, errors). The database, the broker,
the providers and the worker stay out of a pipeline's reach.
"""

from docpipe.pipelines.model import JSONSchema, Pipeline, PipelineError, Step, StepInput

__all__ = ["JSONSchema", "Pipeline", "PipelineError", "Step", "StepInput"]
