"""Shared fixtures: a real PostgreSQL (throwaway, started from the local binaries unless
DOCPIPE_TEST_POSTGRES_URL names a server to use), migrated once per session and emptied
before each test that asks for ``db`` (every table the catalog lists: none to keep by hand;
tests/support/emptying.py says how, at the cost of what the test before left)."""

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
from tests.support.emptying import Emptying
from tests.support.servers import create_database, service_dir

pytest_plugins = ["tests.support.processes", "tests.support.provider_batches"]

# Fixtures that start docpipe's own processes (celery workers, beat, uvicorn: all through
# process_group), a browser or a chaos stack. A test that asks for one, however indirectly,
# is marked `processes`; `make test-fast` runs the others, so a new test lands on the right
# side of it without anyone keeping a list. A test that starts them another way (a uvicorn of
# its module's own, `docpipe stack up` as a subprocess) carries the mark itself.
PROCESS_FIXTURES = frozenset({"process_group", "chromium", "chaos"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.processes)


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


@pytest.fixture(scope="session")
def emptying(database_url: str) -> Emptying:
    """How to empty every table the migrations made (as the catalog lists them) but their
    own record of what was applied."""
    with psycopg.connect(database_url) as conn:
        return Emptying.read(conn)


@pytest.fixture
def db(database_url: str, emptying: Emptying) -> Iterator[Database]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        emptying.empty(conn)
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
