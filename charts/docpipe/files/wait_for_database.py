"""Init container: wait until PostgreSQL answers (and, with --schema, until every migration
shipped in this image is applied), then exit 0; exit 1 after DOCPIPE_WAIT_TIMEOUT_S.

Runs once per pod start from the docpipe image itself, with the same DOCPIPE_* environment
as the main container. The migrations Job applies the schema (`docpipe migrate`).
"""

import os
import sys
import time

import psycopg

from docpipe.state.migrate import migrations
from docpipe.settings import get_settings

POLL_S = 3.0


def missing_migrations(url: str) -> list[str]:
    wanted = {migration.name for migration in migrations()}
    with psycopg.connect(url, connect_timeout=5) as conn:
        try:
            done = {row[0] for row in conn.execute("SELECT name FROM docpipe_migration")}
        except psycopg.errors.UndefinedTable:
            done = set()
    return sorted(wanted - done)


def main() -> int:
    schema = "--schema" in sys.argv[1:]
    timeout_s = float(os.environ.get("DOCPIPE_WAIT_TIMEOUT_S", "600"))
    url = get_settings().database_url
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if not schema:
                with psycopg.connect(url, connect_timeout=5):
                    print("database is reachable", flush=True)
                    return 0
            missing = missing_migrations(url)
            if not missing:
                print("database schema is up to date", flush=True)
                return 0
            reason = f"waiting for the migrations Job to apply: {', '.join(missing)}"
        except psycopg.OperationalError as exc:
            reason = f"database not reachable yet: {str(exc).strip()[:200]}"
        if time.monotonic() > deadline:
            print(f"gave up after {timeout_s:g}s: {reason}", file=sys.stderr, flush=True)
            return 1
        print(reason, flush=True)
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
