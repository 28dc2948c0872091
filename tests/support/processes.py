"""Fixtures that run docpipe's real processes: Redis, the fake provider, celery workers and
beat, exactly as the images run them (see docpipe_dev.processes)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from docpipe.broker.transport import CeleryPublisher, app
from docpipe.settings import get_settings
from docpipe.state.db import Database
from docpipe_api.main import create_app
from docpipe_dev.localstack import LocalRedis, free_port
from docpipe_dev.processes import ManagedProcess, api_argv, beat_argv, stop_together, worker_argv
from tests.support.fakellm import FakeLLM, start_fake_llm
from tests.support.servers import service_dir

# Short timings so that recovery paths run in seconds; the relations between them are the
# production ones (validated by Settings at every process start).
FAST_TIMINGS = {
    "DOCPIPE_LEASE_TTL_S": "3",
    "DOCPIPE_HEARTBEAT_INTERVAL_S": "1",
    "DOCPIPE_REAPER_INTERVAL_S": "1",
    "DOCPIPE_REDRIVE_GRACE_S": "3",
    "DOCPIPE_OUTBOX_SWEEP_INTERVAL_S": "1",
    "DOCPIPE_OUTBOX_GRACE_S": "1",
    "DOCPIPE_RETRY_BACKOFF_BASE_S": "0.2",
    "DOCPIPE_RETRY_BACKOFF_CAP_S": "2",
    "DOCPIPE_LLM_TIMEOUT_S": "5",
    "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "30",
    "DOCPIPE_TASK_TIME_LIMIT_S": "40",
}


@pytest.fixture(scope="session")
def redis_server() -> Iterator[LocalRedis]:
    with service_dir("redis") as state, LocalRedis(state, persist=False) as server:
        yield server


@pytest.fixture
def broker(redis_server: LocalRedis) -> Iterator[redis.Redis]:
    """The broker's Redis, emptied before the test."""
    if not redis_server.is_running():
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def fake_llm_server() -> Iterator[FakeLLM]:
    with start_fake_llm() as fake:
        yield fake


@pytest.fixture
def fake_llm(fake_llm_server: FakeLLM) -> FakeLLM:
    """The fake provider with default behaviour (no latency, no faults, no rate limit)."""
    fake_llm_server.control("POST", "/control/reset")
    return fake_llm_server


@pytest.fixture
def stack_env(
    database_url: str, redis_server: LocalRedis, fake_llm_server: FakeLLM, tmp_path: Path
) -> dict[str, str]:
    return {
        "DOCPIPE_DATABASE_URL": database_url,
        "DOCPIPE_REDIS_URL": redis_server.url,
        "DOCPIPE_LLM_BASE_URL": fake_llm_server.url + "/v1",
        "DOCPIPE_LLM_API_KEY": "test-key",
        "DOCPIPE_LIVENESS_FILE": str(tmp_path / "alive"),
        "DOCPIPE_METRICS_PORT": "0",  # tests that scrape pass a free port
        "DOCPIPE_AUTH": "none",  # tests that want API keys pass DOCPIPE_AUTH="keys"
        **FAST_TIMINGS,
    }


ProcessFactory = Callable[..., ManagedProcess]


class ProcessGroup:
    """docpipe processes started together (for a test, or a module's shared stack), their
    logs in ``log_dir``; ``stop_all`` stops them in reverse order."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir, self.env = log_dir, env
        self.started: list[ManagedProcess] = []

    def start(self, name: str, argv: list[str], ready: str | None, **env: str) -> ManagedProcess:
        proc = ManagedProcess(
            name, argv, self.log_dir / f"{name}-{len(self.started)}.log", env={**self.env, **env}
        ).start()
        self.started.append(proc)
        if ready:
            proc.wait_for_log(ready, timeout_s=60)
        return proc

    def start_api(self, **env: str) -> str:
        """The API as a real uvicorn process; returns its URL."""
        port = free_port()
        self.start(
            "api", api_argv(host="127.0.0.1", port=port), "Application startup complete", **env
        )
        return f"http://127.0.0.1:{port}"

    def start_worker(
        self, lane: str = "interactive", concurrency: int = 2, **env: str
    ) -> ManagedProcess:
        return self.start(
            f"worker-{lane}", worker_argv(lane, concurrency=concurrency), r"\bready\.", **env
        )

    def stop_all(self) -> None:
        # Together: a prefork worker alone takes 1-2 s (its pool processes sleep a second in
        # billiard's exit), and a test may have several.
        stop_together(list(reversed(self.started)), lambda _: 20)
        self.started.clear()


@pytest.fixture
def process_group(tmp_path: Path, stack_env: dict[str, str]) -> Iterator[ProcessGroup]:
    """docpipe processes for this test; all are stopped (and their logs kept in tmp_path)
    when it ends."""
    group = ProcessGroup(tmp_path, stack_env)
    yield group
    group.stop_all()


@pytest.fixture
def start_process(process_group: ProcessGroup) -> ProcessFactory:
    return process_group.start


@pytest.fixture
def start_worker(process_group: ProcessGroup) -> Callable[..., ManagedProcess]:
    return process_group.start_worker


@pytest.fixture
def start_beat(start_process: ProcessFactory) -> Callable[..., ManagedProcess]:
    def start(**env: str) -> ManagedProcess:
        return start_process("beat", beat_argv(), r"beat: Starting", **env)

    return start


def wait_until(predicate: Callable[[], Any], timeout_s: float = 60.0, every_s: float = 0.1) -> Any:
    """The first truthy value of ``predicate()``, polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(every_s)
    raise TimeoutError(f"condition not met within {timeout_s}s")


def use_celery_broker(url: str) -> None:
    """Point docpipe's Celery app at ``url``: its connection and producer pools are looked up
    per broker URL on first use, so forget the ones it holds for the previous URL."""
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def publisher(redis_server: LocalRedis) -> Iterator[CeleryPublisher]:
    """Publishes outbox rows from the test process to the test broker."""
    previous = app.conf.broker_url
    use_celery_broker(redis_server.url)
    yield CeleryPublisher()
    use_celery_broker(previous)


@pytest.fixture
def make_api_client(
    db: Database, database_url: str, redis_server: LocalRedis, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., TestClient]]:
    """The API in-process against the test PostgreSQL and Redis; keyword arguments are
    DOCPIPE_* settings (``max_batch_documents=5``). Every request is tenant "default"
    unless the test asks for API keys (``auth="keys"``)."""
    clients: list[TestClient] = []
    previous = app.conf.broker_url

    def make(**settings: object) -> TestClient:
        monkeypatch.setenv("DOCPIPE_DATABASE_URL", database_url)
        monkeypatch.setenv("DOCPIPE_REDIS_URL", redis_server.url)
        monkeypatch.setenv("DOCPIPE_AUTH", "none")
        monkeypatch.setenv("DOCPIPE_METRICS_PORT", "0")  # tests that scrape pass a free port
        for name, value in settings.items():
            monkeypatch.setenv(f"DOCPIPE_{name.upper()}", str(value))
        get_settings.cache_clear()
        use_celery_broker(redis_server.url)
        client = TestClient(create_app())
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)
    use_celery_broker(previous)
    get_settings.cache_clear()


@pytest.fixture
def start_api(process_group: ProcessGroup) -> Callable[..., str]:
    """Start the API as a real uvicorn process; returns its URL."""
    return process_group.start_api
