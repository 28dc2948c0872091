"""Migrations are the only way the schema changes, and they add up to schema.sql."""

from __future__ import annotations

import shutil
import subprocess
import threading
from importlib.resources import files
from pathlib import Path

import psycopg

from docpipe.state.migrate import apply_migrations, migrations
from docpipe_dev.localstack import postgres_bindir
from tests.servers import create_database


def schema_dump(url: str) -> str:
    """The schema as pg_dump prints it, minus the migration ledger and comments."""
    pg_dump = postgres_bindir() / "pg_dump"
    if not pg_dump.exists():
        pg_dump = Path(shutil.which("pg_dump") or "pg_dump")
    out = subprocess.run(
        [
            str(pg_dump),
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "--exclude-table",
            "docpipe_migration*",
            url,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    lines = [line for line in out.splitlines() if line and not line.startswith("--")]
    return "\n".join(line for line in lines if not line.startswith(("\\restrict", "\\unrestrict")))


def test_applying_every_migration_gives_schema_sql(postgres_admin_url: str) -> None:
    migrated = create_database(postgres_admin_url, "docpipe_migrated")
    from_schema = create_database(postgres_admin_url, "docpipe_schema")
    apply_migrations(migrated)
    schema_sql = files("docpipe.state").joinpath("sql/schema.sql").read_text(encoding="utf-8")
    with psycopg.connect(from_schema, autocommit=True) as conn:
        conn.execute(schema_sql.encode())
    assert schema_dump(migrated) == schema_dump(from_schema)
    assert "CREATE TABLE public.pipeline_run" in schema_dump(migrated)


def test_migrate_is_idempotent(postgres_admin_url: str) -> None:
    url = create_database(postgres_admin_url, "docpipe_idem")
    names = [name for name, _ in migrations()]
    assert apply_migrations(url) == names
    assert apply_migrations(url) == []


def test_concurrent_migrations_apply_each_file_once(postgres_admin_url: str) -> None:
    url = create_database(postgres_admin_url, "docpipe_race")
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            results.append(apply_migrations(url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = sorted(name for result in results for name in result)
    assert applied == sorted(name for name, _ in migrations())
