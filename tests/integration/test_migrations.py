"""Migrations are the only way the schema changes, and they add up to schema.sql."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from importlib.resources import files
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from docpipe.state.migrate import (
    NO_TRANSACTION,
    MigrationLockTimeout,
    apply_migrations,
    migrations,
)
from docpipe_dev.localstack import postgres_bindir
from tests.support.servers import create_database


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
            # The call log's weekly partitions are named after the week they were made in.
            "--exclude-table",
            "llm_call_log_p2*",
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
    names = [m.name for m in migrations()]
    assert apply_migrations(url) == names
    assert apply_migrations(url) == []


def migrate_concurrently(url: str, migrators: int, folder: Path | None = None) -> list[str]:
    """Run ``docpipe migrate`` ``migrators`` times at once; the names they applied, sorted
    (each once if all went well). Fails on any migrator's error."""
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            results.append(apply_migrations(url, folder=folder))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(migrators)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return sorted(name for result in results for name in result)


def test_concurrent_migrations_apply_each_file_once(postgres_admin_url: str) -> None:
    url = create_database(postgres_admin_url, "docpipe_race")
    assert migrate_concurrently(url, 6) == sorted(m.name for m in migrations())


# --- lock timeouts and indexes built CONCURRENTLY -----------------------------------------


def write_migrations(folder: Path, **files_by_name: str) -> Path:
    folder.mkdir(exist_ok=True)
    for name, text in files_by_name.items():
        (folder / f"{name}.sql").write_text(text)
    return folder


def applied(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM docpipe_migration ORDER BY name")]


TABLE = "CREATE TABLE t (id bigserial PRIMARY KEY, x integer NOT NULL);\n"
FILL = "INSERT INTO t (x) SELECT g % 1000 FROM generate_series(1, 20000) g;\n"


def test_a_migration_waiting_on_a_held_lock_times_out_with_a_clear_error(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    url = create_database(postgres_admin_url, "docpipe_locked")
    folder = write_migrations(tmp_path / "m", **{"0001_t": TABLE})
    apply_migrations(url, folder=folder)
    write_migrations(folder, **{"0002_column": "ALTER TABLE t ADD COLUMN y integer;\n"})
    with psycopg.connect(url) as holder:
        holder.execute("SELECT count(*) FROM t")  # a long transaction: it holds t until it ends
        started = time.monotonic()
        with pytest.raises(MigrationLockTimeout) as error:
            apply_migrations(url, folder=folder, lock_timeout_s=0.2, attempts=3)
        waited = time.monotonic() - started
        holder.rollback()
    assert "migration 0002_column.sql waited more than 0.2 s for a lock, 3 times" in str(
        error.value
    )
    assert "nothing of it was applied" in str(error.value)
    assert waited < 5, "bounded: three lock timeouts and two short pauses"
    assert applied(url) == ["0001_t.sql"]
    # Once the long transaction has ended, the same command goes through.
    assert apply_migrations(url, folder=folder, lock_timeout_s=0.2) == ["0002_column.sql"]


def index_validity(url: str, name: str) -> bool | None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname = %s",
            (name,),
        ).fetchone()
    return None if row is None else bool(row[0])


CONCURRENT_INDEX = f"{NO_TRANSACTION}\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_x_idx ON t (x);\n"


def test_a_concurrent_index_migration_applies_outside_a_transaction_and_is_recorded(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    url = create_database(postgres_admin_url, "docpipe_concurrently")
    folder = write_migrations(
        tmp_path / "m", **{"0001_t": TABLE + FILL, "0002_index": CONCURRENT_INDEX}
    )
    assert apply_migrations(url, folder=folder) == ["0001_t.sql", "0002_index.sql"]
    assert index_validity(url, "t_x_idx") is True
    assert applied(url) == ["0001_t.sql", "0002_index.sql"]
    assert apply_migrations(url, folder=folder) == []


def test_an_invalid_index_left_by_a_failed_concurrent_build_is_dropped_and_rebuilt(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    url = create_database(postgres_admin_url, "docpipe_invalid_index")
    folder = write_migrations(tmp_path / "m", **{"0001_t": TABLE + FILL})
    apply_migrations(url, folder=folder)
    # A build that died half-way (here: duplicates) leaves an INVALID index of that name,
    # which IF NOT EXISTS alone would keep for good.
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("CREATE UNIQUE INDEX CONCURRENTLY t_x_key ON t (x)")
        conn.execute("DELETE FROM t WHERE id > 1000")
    assert index_validity(url, "t_x_key") is False
    unique = f"{NO_TRANSACTION}\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS t_x_key ON t (x);\n"
    write_migrations(folder, **{"0002_unique": unique})
    assert apply_migrations(url, folder=folder) == ["0002_unique.sql"]
    assert index_validity(url, "t_x_key") is True


def test_concurrent_migrators_build_a_concurrent_index_once_without_deadlock(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    url = create_database(postgres_admin_url, "docpipe_concurrent_race")
    folder = write_migrations(
        tmp_path / "m", **{"0001_t": TABLE + FILL, "0002_index": CONCURRENT_INDEX}
    )
    # Waiting inside pg_advisory_lock, the others would hold a snapshot that the index build
    # waits for: PostgreSQL would detect a deadlock and abort one of them.
    assert migrate_concurrently(url, 4, folder) == ["0001_t.sql", "0002_index.sql"]
    assert index_validity(url, "t_x_idx") is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (x);\n",
            "cannot run inside a transaction; start the file with the line",
        ),
        (
            f"{NO_TRANSACTION}\nCREATE INDEX CONCURRENTLY i ON t (x);\n",
            r"write CREATE INDEX CONCURRENTLY IF NOT EXISTS \(i\)",
        ),
    ],
)
def test_a_migration_that_breaks_the_rules_is_refused_before_anything_runs(
    postgres_admin_url: str, tmp_path: Path, text: str, message: str
) -> None:
    url = create_database(postgres_admin_url, "docpipe_refused")
    folder = write_migrations(tmp_path / "m", **{"0001_t": TABLE, "0002_bad": text})
    with pytest.raises(ValueError, match=message):
        apply_migrations(url, folder=folder)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('t')").fetchone() == (None,)


def test_warning_sentences_written_before_0025_become_warnings_with_kind_page_and_value(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    url = create_database(postgres_admin_url, "docpipe_warnings")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for migration in migrations():
        if migration.name < "0025":
            (earlier / migration.name).write_text(migration.sql, encoding="utf-8")
    apply_migrations(url, folder=earlier)
    low, large = "page 2: low OCR confidence (41.5)", "page 3 is large: rendered at 150 dpi for OCR"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes, format, "
            "extraction_warnings) VALUES ('t', 'd', '', 'x', 1, 'pdf', %s)",
            (Jsonb([low, large]),),
        )
        conn.execute(
            "INSERT INTO document_page (tenant_id, document_id, page, text, warning) "
            "VALUES ('t', 'd', 1, '', %s), ('t', 'd', 0, 'fine', NULL)",
            (low,),
        )
    apply_migrations(url)
    with psycopg.connect(url) as conn:
        document = conn.execute("SELECT extraction_warnings FROM document").fetchone()
        pages = conn.execute(
            "SELECT page, warnings, rotation FROM document_page ORDER BY page"
        ).fetchall()
    structured_low = {"kind": "low_ocr_confidence", "page": 2, "value": 41.5, "message": low}
    assert document == (
        [structured_low, {"kind": "reduced_resolution", "page": 3, "value": 150, "message": large}],
    )
    assert pages == [(0, [], 0), (1, [structured_low], 0)]
