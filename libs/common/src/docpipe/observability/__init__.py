"""Metrics and traces of every docpipe process: Prometheus metrics that survive Celery's
prefork pool (:mod:`.metrics`, :mod:`.multiprocess`) and OpenTelemetry tracing with one
trace per run across the queue (:mod:`.tracing`).

May import: pipelines (to start known series at zero) and the foundation.
"""
