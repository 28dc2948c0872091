"""The Celery processes: the app with its worker and beat configuration (:mod:`.app`), the
tasks (:mod:`.tasks`), the step executor (:mod:`.executor`), webhook delivery
(:mod:`.webhook_delivery`, its request in :mod:`.webhook_request`), the liveness
file, the signal handlers that give workers their metrics and traces, and beat's gauges
read from Redis and PostgreSQL (:mod:`.state_collector`).

Start a pool with ``celery -A docpipe.worker.app worker``, the beat with
``celery -A docpipe.worker.app beat``. May import everything below it; only the CLI and
the development tooling sit above, and the API never imports it.
"""
