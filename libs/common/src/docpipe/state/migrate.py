"""Apply the SQL migrations in ``sql/migrations`` in name order, each exactly once.

Safe to run from several processes at once (a Helm hook Job racing a developer's CLI): a
session-level advisory lock serialises them, and each migration commits together with the
row that records it.
"""

from __future__ import annotations

from importlib.resources import files

import psycopg

__all__ = ["MIGRATION_LOCK_KEY", "apply_migrations", "migrations"]

# An arbitrary constant that identifies "docpipe migrations" among advisory locks.
MIGRATION_LOCK_KEY = 0x646F6370_6D696772

_CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS docpipe_migration (
    name       text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


def migrations() -> list[tuple[str, str]]:
    """(name, sql) of every migration, in the order they apply."""
    folder = files("docpipe.state").joinpath("sql/migrations")
    return sorted(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )


def apply_migrations(database_url: str) -> list[str]:
    """Bring the database up to date; returns the names applied now (empty when current)."""
    applied_now: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            conn.execute(_CREATE_LEDGER)
            done = {row[0] for row in conn.execute("SELECT name FROM docpipe_migration")}
            for name, sql in migrations():
                if name in done:
                    continue
                with conn.transaction():
                    conn.execute(sql.encode())
                    conn.execute("INSERT INTO docpipe_migration (name) VALUES (%s)", (name,))
                applied_now.append(name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    return applied_now
