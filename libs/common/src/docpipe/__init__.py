"""docpipe: durable LLM document pipelines on Celery, Redis and PostgreSQL.

One folder per role, each importing only the ones listed below it (checked by
import-linter, see ``.importlinter``):

- :mod:`docpipe.cli`: the ``docpipe`` command and its HTTP client;
- :mod:`docpipe.worker`: Celery app, tasks, step executor, liveness (workers and beat);
- :mod:`docpipe.providers`: provider client, shared limiter, memoised calls;
- :mod:`docpipe.state`: the state machine in PostgreSQL and its SQL;
- :mod:`docpipe.broker`: queue names, publishing, what waits in Redis;
- :mod:`docpipe.observability`: metrics and tracing;
- :mod:`docpipe.pipelines`: pipeline definitions and the built-in pipeline;
- the foundation every role shares, its modules independent of each other:
  :mod:`docpipe.settings` (a package, one module per concern), :mod:`docpipe.errors`,
  :mod:`docpipe.statuses`, :mod:`docpipe.backoff`, :mod:`docpipe.json_codec` and
  :mod:`docpipe.destinations` (where a tenant's URL may lead: the SSRF guard).

The API (``docpipe_api``) uses the state machine, the broker, pipelines and observability;
the development tooling (``docpipe_dev``) is a separate package that no image installs.
"""

from importlib.metadata import version as _version

# The one source of the version is libs/common/pyproject.toml; the CLI, /healthz, the
# images' labels and the chart's appVersion name the same (tests/unit/test_version.py).
__version__ = _version("docpipe")
