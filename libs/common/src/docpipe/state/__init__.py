"""The state machine and its SQL: every row docpipe keeps and every transition of it.

``sql/schema.sql`` is the whole schema, ``sql/queries/`` the named statements (a file for
each module, ``runs.sql`` for :mod:`.runs`, and ``gauges.sql`` for the gauges beat exports)
and ``sql/migrations/`` what gets applied. Each module owns the transitions of its tables:
runs and steps (:mod:`.runs`), provider calls (:mod:`.call_log`), batches (:mod:`.batches`),
admission of batch runs (:mod:`.admission`), the outbox (:mod:`.outbox`), recovery
(:mod:`.recovery`), documents, tenants' keys, webhook deliveries (:mod:`.webhooks`) and
tenants' webhook signing secrets (:mod:`.webhook_secrets`), periodic jobs, retention.
Every transition is one guarded statement; a lost race matches no row.

May import: the broker (messages and queue names), pipelines, observability, and
docpipe's foundation (settings, errors, statuses). Never the providers, the worker or the CLI.
"""
