"""Throwaway PostgreSQL and Redis servers run from the locally installed binaries.

`docpipe stack up` uses them when no database or Redis URL is configured (data is kept in the
state directory across restarts), and the test suite uses them for fresh instances on free
ports that chaos tests may kill and restart.

Every failure raises `LocalServiceError` (a `RuntimeError`) with a message that says what to
do; start-up failures carry the tail of the server log.

A `LocalPostgres` owns its state directory ``data_dir``::

    data_dir/pgdata/            the cluster: initdb'd on the first start, reused afterwards
    data_dir/postgres.log       server log, appended across restarts
    data_dir/.s.PGSQL.<port>    unix socket (none if that path is too long; TCP always works)

A `LocalRedis` keeps its append-only file and ``redis.log`` in ``data_dir``.

PostgreSQL refuses to run as root. When we are root, the binaries run as the ``postgres``
user, ``data_dir`` is chowned to it, and every directory above ``data_dir`` must be
searchable by it: pytest's ``tmp_path`` (below a 0700 directory) is not, a
``tempfile.mkdtemp()`` directory chmod-ed to 0o711 is.
"""

from docpipe_dev.localstack._common import INSTALL_HINT, LocalServiceError, free_port
from docpipe_dev.localstack.postgres import LocalPostgres, postgres_bindir
from docpipe_dev.localstack.redis import LocalRedis

__all__ = [
    "INSTALL_HINT",
    "LocalPostgres",
    "LocalRedis",
    "LocalServiceError",
    "free_port",
    "postgres_bindir",
]
