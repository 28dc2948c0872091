"""Shared fixtures: a real PostgreSQL (throwaway, started from the local binaries unless
DOCPIPE_TEST_POSTGRES_URL names a server to use), migrated once per session and emptied
before each test that asks for ``db``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.migrate import apply_migrations
from docpipe_dev.localstack import LocalPostgres
from tests.servers import create_database, service_dir

pytest_plugins = ["tests.processes"]

TABLES = (
    "periodic_job",
    "outbox",
    "review_decision",
    "llm_call_log",
    "pipeline_step_result",
    "pipeline_run",
    "batch",
    "document_page",
    "document_original_chunk",
    "document",
    "api_key",
    "webhook_secret",
)


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """URL of a server where the tests may create databases."""
    if url := os.environ.get("DOCPIPE_TEST_POSTGRES_URL"):
        yield url
        return
    with service_dir("postgres") as state, LocalPostgres(state) as pg:
        yield pg.url


@pytest.fixture(scope="session")
def database_url(postgres_admin_url: str) -> str:
    url = create_database(postgres_admin_url, "docpipe_test")
    apply_migrations(url)
    return url


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE".encode())
    database = Database(database_url)
    yield database
    database.close()


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings for in-process tests: short leases and backoff so retries are quick."""
    return Settings(
        database_url=database_url,
        lease_ttl_s=2.0,
        heartbeat_interval_s=0.5,
        retry_backoff_base_s=0.05,
        retry_backoff_cap_s=0.5,
        llm_timeout_s=2.0,
        task_soft_time_limit_s=10.0,
        task_time_limit_s=15.0,
        limiter_max_wait_s=5.0,
        database_statement_timeout_s=5.0,
        database_socket_timeout_s=5.0,
        database_pool_timeout_s=5.0,
        webhook_timeout_s=2.0,
    )


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
