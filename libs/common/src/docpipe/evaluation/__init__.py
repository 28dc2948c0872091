"""Measuring quality: a pipeline's outputs compared with expected ones, field by field.

- :mod:`~docpipe.evaluation.comparators`: how each field is compared (defaults from the
  output schema, overrides from the pipeline);
- :mod:`~docpipe.evaluation.scoring`: correct / wrong / missing / extra per field, and
  precision, recall, F1, accuracy and the evidence score;
- :mod:`~docpipe.evaluation.paired`: the difference of two evaluations with its interval;
- :mod:`~docpipe.evaluation.assignment`: pairing list rows.

Pure functions: no database, no model. Below the pipelines (which check their comparator
overrides with it when they load).
"""
