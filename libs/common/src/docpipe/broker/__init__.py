"""Messages between docpipe's processes: queue names, the Celery transport, publishing, and
what waits in the queues.

Redis is transport only: a message carries ids, never payloads or results. The API and the
workers publish through the same :class:`~docpipe.broker.transport.CeleryPublisher`; the
work behind a message is bound by the worker (:mod:`docpipe.worker.tasks`).

May import: observability (trace context across the queue) and the foundation.
"""
