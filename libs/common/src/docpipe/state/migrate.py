"""Apply the SQL migrations in ``sql/migrations`` in name order, each exactly once, without
ever queueing behind a long transaction.

Rules for a migration file (``sql/migrations/README.md`` says the same to their authors):

- It runs in one transaction together with the row that records it, with a bounded wait
  for each lock (``lock_timeout``, 5 s by default). A statement waiting for a table lock
  blocks every later reader and writer of that table behind it, so a migration that cannot
  have its locks in time rolls back, waits a moment and tries again (5 attempts by
  default); then ``docpipe migrate`` fails with :class:`MigrationLockTimeout`, naming the
  migration, and nothing has changed.
- A file whose first line is ``-- docpipe: no-transaction`` runs statement by statement in
  autocommit instead: ``CREATE INDEX CONCURRENTLY`` (mandatory for an index on a table that
  can be large: pipeline_run, pipeline_step_result, llm_call_log, outbox, document,
  webhook_delivery) cannot run inside a transaction. Its statements end with ``;`` at the end
  of a line and must be idempotent (``IF NOT EXISTS`` / ``IF EXISTS``; it is checked for
  concurrent index builds), because a crash between them leaves the migration half applied
  and unrecorded, to run again. A CONCURRENTLY build that failed (a crash, a lock timeout)
  leaves an INVALID index behind, which ``IF NOT EXISTS`` would keep: the indexes the file
  builds are dropped first when they are invalid, and built again.

Several ``docpipe migrate`` at once (a Helm hook Job racing a developer's CLI) take turns on
a session-level advisory lock. The others wait by polling for it, not in a statement: an
index build CONCURRENTLY waits for every transaction that holds a snapshot, so a second
migrator blocked inside ``pg_advisory_lock`` would deadlock with the first one's build.
"""

from __future__ import annotations

import contextlib
import random
import re
import time
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

__all__ = [
    "MIGRATION_LOCK_KEY",
    "NO_TRANSACTION",
    "Migration",
    "MigrationLockTimeout",
    "apply_migrations",
    "migrations",
]

# An arbitrary constant that identifies "docpipe migrations" among advisory locks.
MIGRATION_LOCK_KEY = 0x646F6370_6D696772
NO_TRANSACTION = "-- docpipe: no-transaction"

_CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS docpipe_migration (
    name       text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
_STATEMENT_END = re.compile(r";[ \t]*$", re.MULTILINE)
_CONCURRENT_INDEX = re.compile(
    r"\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(IF\s+NOT\s+EXISTS\s+)?(\w+)", re.IGNORECASE
)
_INVALID_INDEXES = """
SELECT c.relname FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE NOT i.indisvalid AND n.nspname = current_schema() AND c.relname = ANY(%s)
"""
_LOCK_POLL_S = 0.2


class MigrationLockTimeout(RuntimeError):
    """A migration could not get its locks within lock_timeout, attempt after attempt."""


class Migration(NamedTuple):
    name: str
    sql: str

    @property
    def transactional(self) -> bool:
        return not self.sql.startswith(NO_TRANSACTION)

    def statements(self) -> list[str]:
        """The file's statements, in order (comment-only chunks left out)."""
        found = []
        for chunk in _STATEMENT_END.split(self.sql):
            lines = chunk.splitlines()
            if any(line.strip() and not line.lstrip().startswith("--") for line in lines):
                found.append(chunk.strip())
        return found

    def concurrent_indexes(self) -> list[str]:
        """Names of the indexes the file builds CONCURRENTLY."""
        return [match.group(2) for match in _CONCURRENT_INDEX.finditer(self.sql)]

    def check(self) -> None:
        """Refuse a file that breaks the rules above, before anything runs."""
        builds = list(_CONCURRENT_INDEX.finditer(self.sql))
        if builds and self.transactional:
            raise ValueError(
                f"{self.name}: CREATE INDEX CONCURRENTLY cannot run inside a transaction; "
                f"start the file with the line {NO_TRANSACTION!r}"
            )
        if unguarded := [m.group(2) for m in builds if not m.group(1)]:
            raise ValueError(
                f"{self.name}: write CREATE INDEX CONCURRENTLY IF NOT EXISTS "
                f"({', '.join(unguarded)}): a no-transaction migration may run again after a "
                f"crash"
            )


def migrations(folder: Traversable | None = None) -> list[Migration]:
    """Every migration (of ``folder``, default: docpipe's own), in the order they apply."""
    folder = folder or files("docpipe.state").joinpath("sql/migrations")
    found = sorted(
        Migration(entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )
    for migration in found:
        migration.check()
    return found


def apply_migrations(
    database_url: str,
    *,
    lock_timeout_s: float = 5.0,
    attempts: int = 5,
    folder: Traversable | None = None,
) -> list[str]:
    """Bring the database up to date; returns the names applied now (empty when current).
    Raises MigrationLockTimeout when a migration could not get its locks ``attempts`` times."""
    pending = migrations(folder)
    applied_now: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        _take_turn(conn)
        try:
            conn.execute(
                sql.SQL("SET lock_timeout = {}").format(f"{round(lock_timeout_s * 1000)}ms")
            )
            conn.execute(_CREATE_LEDGER)
            done = {row[0] for row in conn.execute("SELECT name FROM docpipe_migration")}
            for migration in pending:
                if migration.name in done:
                    continue
                _apply_with_retries(conn, migration, lock_timeout_s, attempts)
                applied_now.append(migration.name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    return applied_now


def _take_turn(conn: psycopg.Connection[Any]) -> None:
    """Wait for the migration lock by polling, holding no snapshot between tries."""
    while True:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATION_LOCK_KEY,)).fetchone()
        if row and row[0]:
            return
        time.sleep(_LOCK_POLL_S)


def _apply_with_retries(
    conn: psycopg.Connection[Any],
    migration: Migration,
    lock_timeout_s: float,
    attempts: int,
) -> None:
    for attempt in range(1, attempts + 1):
        try:
            _apply(conn, migration)
            return
        except psycopg.errors.LockNotAvailable as exc:
            if attempt == attempts:
                # An invalid index is not used by queries but still costs every write.
                with contextlib.suppress(psycopg.errors.LockNotAvailable):
                    _drop_invalid_indexes(conn, migration.concurrent_indexes())
                kept = (
                    "nothing of it was applied"
                    if migration.transactional
                    else "the statements it completed stay (they are idempotent)"
                )
                raise MigrationLockTimeout(
                    f"migration {migration.name} waited more than {lock_timeout_s:g} s for a "
                    f"lock, {attempts} times: a long transaction holds a table it changes "
                    f"(see pg_stat_activity and pg_locks); {kept}. Run docpipe migrate again "
                    f"once that transaction has ended. ({exc})"
                ) from exc
            # Give the blocking transaction time to end, and concurrent writers a turn.
            time.sleep(min(30.0, lock_timeout_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1))


def _apply(conn: psycopg.Connection[Any], migration: Migration) -> None:
    if migration.transactional:
        with conn.transaction():
            conn.execute(migration.sql.encode())
            conn.execute("INSERT INTO docpipe_migration (name) VALUES (%s)", (migration.name,))
        return
    _drop_invalid_indexes(conn, migration.concurrent_indexes())
    for statement in migration.statements():
        conn.execute(statement.encode())
    conn.execute("INSERT INTO docpipe_migration (name) VALUES (%s)", (migration.name,))


def _drop_invalid_indexes(conn: psycopg.Connection[Any], names: list[str]) -> None:
    """Drop what failed CONCURRENTLY builds of these indexes left behind (INVALID indexes)."""
    if not names:
        return
    for (name,) in conn.execute(_INVALID_INDEXES, (names,)).fetchall():
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
