"""docpipe's development tooling, installed by ``make`` into the venv and never into an image.

- :mod:`docpipe_dev.localstack`: PostgreSQL and Redis as throwaway local processes;
- :mod:`docpipe_dev.processes`: every docpipe service's command line, and a supervisor;
- :mod:`docpipe_dev.stack`: the whole stack on one machine (``docpipe stack up``);
- :mod:`docpipe_dev.samples`: generated sample contracts with their ground truth;
- :mod:`docpipe_dev.dashboards`: the Grafana dashboards as code (``make dashboards``);
- :mod:`docpipe_dev.cli`: the ``docpipe stack up | demo | samples`` commands.

It may import anything of docpipe; nothing in docpipe, the API or the fake provider imports it.
"""
