"""Secrets never reach a log: the API, a worker and beat run a document end to end (with a
webhook that fails) on a password-protected Redis and a database URL with a password,
and none of the secrets appears in anything they printed."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import httpx
import psycopg
import pytest
import redis
from cryptography.fernet import Fernet

from docpipe.cli.client import ApiError, DocpipeClient
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_dev.localstack import LocalRedis, free_port
from docpipe_dev.processes import ManagedProcess, api_argv
from docpipe_dev.samples import sample_contracts
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import ProcessFactory, wait_until
from tests.support.servers import service_dir

SECRETS = {
    name: f"{name}-{uuid.uuid4().hex}" for name in ("pg-password", "redis-password", "llm-key")
} | {"secrets-key": Fernet.generate_key().decode()}


@pytest.fixture
def redis_with_password() -> Iterator[LocalRedis]:
    with service_dir("redis-auth") as state, LocalRedis(state, persist=False) as server:
        # Closed here: left to the garbage collector, its socket's ResourceWarning would fail
        # whichever test runs when it is collected (it failed an unrelated test once).
        with redis.Redis.from_url(server.url) as admin:
            admin.config_set("requirepass", SECRETS["redis-password"])
        yield server


def database_url_with_password(database_url: str) -> str:
    """The test database's URL with a password in it (the test server trusts local
    connections, so any password works)."""
    parts = psycopg.conninfo.conninfo_to_dict(database_url)
    return (
        f"postgresql://{parts['user']}:{SECRETS['pg-password']}@{parts['host']}:{parts['port']}"
        f"/{parts['dbname']}"
    )


def test_no_secret_appears_in_the_logs_of_the_api_worker_and_beat(
    db: Database,
    database_url: str,
    redis_with_password: LocalRedis,
    fake_llm: FakeLLM,
    start_process: ProcessFactory,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    env = {
        "DOCPIPE_DATABASE_URL": database_url_with_password(database_url),
        "DOCPIPE_REDIS_URL": f"redis://:{SECRETS['redis-password']}@127.0.0.1:"
        f"{redis_with_password.port}/0",
        "DOCPIPE_LLM_API_KEY": SECRETS["llm-key"],
        "DOCPIPE_WEBHOOKS_ENABLED": "true",
        "DOCPIPE_SECRETS_KEY": SECRETS["secrets-key"],
        "DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS": "127.0.0.1/32",
        "DOCPIPE_WEBHOOK_RETRY_BASE_S": "0.2",
        "DOCPIPE_AUTH": "keys",
    }
    port = free_port()
    processes = [
        start_process(
            "api", api_argv(host="127.0.0.1", port=port), "Application startup complete", **env
        ),
        start_worker(**env),
        start_beat(**env),
    ]
    api_key = create_api_key(db, "acme").plaintext
    api = f"http://127.0.0.1:{port}"
    dead_receiver = f"http://127.0.0.1:{free_port()}/hook"  # every delivery attempt fails

    with DocpipeClient(api, api_key=api_key) as client:
        webhook_secret = client.rotate_webhook_secret()["secret"]
        contract = sample_contracts(1)[0]
        client.put_document("contract", contract.text)
        run_id = client.extract("contract", callback_url=dead_receiver)["run_id"]
        wait_until(lambda: client.run(run_id)["status"] == "done", timeout_s=60)
    wait_until(lambda: scalar(db, "SELECT coalesce(max(attempts), 0) FROM webhook_delivery") >= 2)
    forged = f"dp_{'0' * 12}_{uuid.uuid4().hex}{'x' * 11}"
    with DocpipeClient(api, api_key=forged) as intruder, pytest.raises(ApiError) as refused:
        intruder.run(run_id)
    assert refused.value.status == 401
    assert httpx.get(f"{api}/readyz").json()["status"] == "ready"

    for proc in processes:
        proc.stop(timeout_s=20)
    logs = {proc.name: proc.log_text() for proc in processes}
    assert "ready." in logs["worker-interactive"] and "Starting" in logs["beat"]
    assert "webhook" in logs["worker-interactive"], "the failed deliveries were logged"
    # Celery prints its broker URL at start-up, with the password masked.
    assert f"redis://:**@127.0.0.1:{redis_with_password.port}" in logs["worker-interactive"]
    for name, text in logs.items():
        shown_once = {"api-key": api_key, "forged": forged, "webhook-secret": webhook_secret}
        for secret_name, secret in {**SECRETS, **shown_once}.items():
            assert secret not in text, f"{secret_name} appears in the {name} log"
