"""Pipelines: ordered steps with their prompts, models and output schemas, and the built-in
``document_extract:v1`` (contract -> sections -> fields -> summary).

May import: the foundation only (settings, errors). The database, the broker, the
providers and the worker stay out of a pipeline's reach.
"""
