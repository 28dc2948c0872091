"""The API in-process (TestClient) against the test PostgreSQL and a Redis of its own, which
a test may stop (the API tests start no workers)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from docpipe.broker.transport import app as celery_app
from docpipe.settings import get_settings
from docpipe.state.db import Database
from docpipe_api.main import create_app
from docpipe_dev.localstack import LocalRedis
from tests.support.api import MAX_DOCUMENT_BYTES
from tests.support.processes import use_celery_broker


@pytest.fixture(scope="package")
def redis_server() -> Iterator[LocalRedis]:
    parent = Path(tempfile.mkdtemp(prefix="docpipe-api-redis-"))
    try:
        with LocalRedis(parent / "data", persist=False) as server:
            yield server
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def broker_redis(redis_server: LocalRedis) -> Iterator[redis.Redis]:
    redis_server.start()  # in case a test stopped it
    redis_server.flushall()
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def client(
    db: Database,
    database_url: str,
    redis_server: LocalRedis,
    broker_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[TestClient]:
    monkeypatch.setenv("DOCPIPE_DATABASE_URL", database_url)
    monkeypatch.setenv("DOCPIPE_REDIS_URL", redis_server.url)
    monkeypatch.setenv("DOCPIPE_MAX_DOCUMENT_BYTES", str(MAX_DOCUMENT_BYTES))
    monkeypatch.setenv("DOCPIPE_AUTH", "none")  # tenant "default"; keys: test_tenants.py
    monkeypatch.setenv("DOCPIPE_METRICS_PORT", "0")
    monkeypatch.setenv("DOCPIPE_WEBHOOKS_ENABLED", "true")
    monkeypatch.setenv("DOCPIPE_SECRETS_KEY", Fernet.generate_key().decode())
    get_settings.cache_clear()
    previous_broker = celery_app.conf.broker_url
    use_celery_broker(redis_server.url)
    try:
        with TestClient(create_app()) as test_client:
            yield test_client
    finally:
        use_celery_broker(previous_broker)
        get_settings.cache_clear()
