"""Outages answered, not hung: Redis down or silent, PostgreSQL silent, with the real servers.

"Down" is a stopped server (connections refused at once); "silent" is a server in a network
namespace whose packets are dropped (docpipe_dev.partition), which refuses nothing and answers
nothing, as a crashed node or a broken network path does. Every client then has to give up
on its own timeouts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import redis
from fastapi.testclient import TestClient

from docpipe.broker.transport import CeleryPublisher, app, redis_client, transport_config
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.providers.limiter import ProviderLimiter
from docpipe.settings import Settings
from docpipe.state import runs
from docpipe.state.db import Database, Timeouts
from docpipe.state.outbox import publish_outbox
from docpipe.state.recovery import recover_stalled_work
from docpipe.state.webhooks import RetryPolicy
from docpipe_api.deps import RedisDep
from docpipe_api.readiness import APPLICATION_NAME
from docpipe_dev.localstack import LocalRedis, free_port
from docpipe_dev.partition import NetworkNamespace, postgres_in
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import use_celery_broker, wait_until
from tests.support.servers import service_dir

# Slow: each outage is waited out to its clients' timeouts (about 35 s in all); make test-fast
# leaves it out.
pytestmark = pytest.mark.slow

STEP1 = DOCUMENT_EXTRACT.step_names[1]  # a text document's extract_text is done with its run
CONTRACTS = sample_contracts(6)
MODEL = "gpt-4o-mini"  # priced by default: the limiter keeps its limits per model
# Short client timeouts, so that a silent server costs the tests seconds.
SILENT = {"redis_connect_timeout_s": 1.0, "redis_socket_timeout_s": 1.0}


@contextmanager
def redis_down(server: LocalRedis) -> Iterator[None]:
    server.stop()
    try:
        yield
    finally:
        server.start()


def unpublished(db: Database) -> int:
    return int(scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NULL"))


# --- readiness ----------------------------------------------------------------------------


def test_readiness_asks_postgresql_only_so_a_redis_outage_keeps_the_api_in_service(
    make_api_client: Callable[..., TestClient], redis_server: LocalRedis
) -> None:
    client = make_api_client()
    with redis_down(redis_server):
        ready = client.get("/readyz")
    assert (ready.status_code, ready.json()) == (
        200,
        {"status": "ready", "checks": {"postgres": "ok"}},
    )


def test_readiness_keeps_its_connection_and_replaces_one_the_server_ended(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    """Opening a connection was most of a probe's time: the probes keep theirs, and one
    PostgreSQL ended meanwhile (a restart, an administrator) costs no failed probe."""
    client = make_api_client()

    def probe_backends() -> list[int]:
        with db.session() as s:
            rows = s.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                " AND datname = current_database()",
                (APPLICATION_NAME,),
            ).fetchall()
        return [row["pid"] for row in rows]

    for _ in range(5):
        assert client.get("/readyz").status_code == 200
    [kept] = probe_backends()
    with db.session() as s:
        s.conn.execute("SELECT pg_terminate_backend(%s)", (kept,))
    wait_until(lambda: not probe_backends())
    ready = client.get("/readyz")
    assert (ready.status_code, ready.json()["status"]) == (200, "ready")
    [fresh] = probe_backends()
    assert fresh != kept


def test_readiness_names_no_error_to_the_caller_and_logs_it(
    make_api_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    nobody = f"postgresql://postgres:s3cret@127.0.0.1:{free_port()}/docpipe"
    client = make_api_client(database_url=nobody)
    with caplog.at_level(logging.WARNING, logger="docpipe_api.routes.health"):
        down = client.get("/readyz")
    assert down.status_code == 503
    assert down.json() == {"status": "unavailable", "checks": {"postgres": "unavailable"}}
    assert "Connection refused" in caplog.text or "connection failed" in caplog.text
    assert "s3cret" not in down.text


# --- Redis down: writes go to PostgreSQL, the outbox sends them later ---------------------


def test_with_redis_down_writes_are_accepted_and_run_once_it_is_back(
    make_api_client: Callable[..., TestClient],
    db: Database,
    redis_server: LocalRedis,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    client = make_api_client()
    with redis_down(redis_server):
        stored = client.put(
            "/documents/solo",
            content=CONTRACTS[0].text.encode(),
            headers={"Content-Type": "text/plain"},
        )
        extracted = client.post("/documents/solo/extract", headers={"Idempotency-Key": "k"})
        documents = [{"id": f"b-{i}", "text": c.text} for i, c in enumerate(CONTRACTS[1:4])]
        batch = client.post("/batches", json={"documents": documents})
    assert [stored.status_code, extracted.status_code, batch.status_code] == [201, 202, 202]
    # Nothing reached Redis: the first steps wait in the outbox.
    assert unpublished(db) >= 2
    start_worker("interactive")
    start_worker("batch")
    start_beat()  # its outbox sweep publishes what the API could not
    wait_until(lambda: scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'done'") == 4)
    assert unpublished(db) == 0


@pytest.fixture
def persistent_redis() -> Iterator[LocalRedis]:
    """A Redis that keeps its messages across a stop (append-only file)."""
    with service_dir("persistent-redis") as state, LocalRedis(state, persist=True) as server:
        yield server


def test_cancelling_a_batch_while_redis_is_down_commits_and_answers_200(
    make_api_client: Callable[..., TestClient],
    db: Database,
    persistent_redis: LocalRedis,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    client = make_api_client(redis_url=persistent_redis.url, batch_admission_window=2)
    use_celery_broker(persistent_redis.url)  # the fixture restores the previous broker
    broker = redis.Redis.from_url(persistent_redis.url)
    documents = [{"id": f"c-{i}", "text": c.text} for i, c in enumerate(CONTRACTS)]
    batch_id = client.post("/batches", json={"documents": documents}).json()["batch_id"]
    assert broker.llen("llm_batch") == 2  # the admitted runs' first steps wait in Redis
    with redis_down(persistent_redis):
        cancelled = client.post(f"/batches/{batch_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE status <> 'cancelled'") == 0
    # The purge could not happen: the two messages are still queued, and they are no-ops.
    assert broker.llen("llm_batch") == 2
    worker = start_worker("batch", DOCPIPE_REDIS_URL=persistent_redis.url)
    wait_until(lambda: broker.llen("llm_batch") == 0 and not broker.hlen("unacked"))
    worker.stop()
    broker.close()
    assert fake_llm.stats()["requests_total"] == 0
    assert scalar(db, "SELECT count(*) FROM llm_call_log") == 0


def test_a_redis_failure_inside_a_route_answers_503_with_retry_after(
    make_api_client: Callable[..., TestClient], redis_server: LocalRedis
) -> None:
    client = make_api_client()

    # Any route that asks Redis itself (here: a PING through the app's own client).
    def ping(broker_redis: RedisDep) -> dict[str, Any]:
        return {"pong": broker_redis.ping()}

    client.app.add_api_route("/ping-redis", ping)  # type: ignore[attr-defined]
    assert client.get("/ping-redis").json() == {"pong": True}
    with redis_down(redis_server):
        failed = client.get("/ping-redis")
    assert failed.status_code == 503
    assert failed.headers["Retry-After"] == "5"
    assert failed.json() == {"detail": "the broker (Redis) is unavailable, retry later"}


# --- silent servers: packets dropped, nothing refused -------------------------------------


@pytest.fixture
def silent_redis() -> Iterator[tuple[NetworkNamespace, Settings]]:
    """A Redis in a namespace of its own (not yet partitioned) and settings that use it."""
    with service_dir("silent-redis") as logs, NetworkNamespace() as ns:
        logs.mkdir()
        ns.start(
            "redis",
            [
                "redis-server",
                "--bind",
                ns.address,
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
            logs / "redis.log",
        )
        settings = Settings(redis_url=f"redis://{ns.address}:6379/0", **SILENT)  # type: ignore[arg-type]
        client = redis_client(settings)
        wait_until(lambda: _answers(client), timeout_s=20)
        client.close()
        yield ns, settings


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@contextmanager
def timed() -> Iterator[list[float]]:
    elapsed: list[float] = []
    started = time.monotonic()
    try:
        yield elapsed
    finally:
        elapsed.append(time.monotonic() - started)


def test_a_silent_redis_does_not_hang_the_limiter(
    silent_redis: tuple[NetworkNamespace, Settings], caplog: pytest.LogCaptureFixture
) -> None:
    ns, settings = silent_redis
    limiter = ProviderLimiter(redis_client(settings), settings)
    with limiter.slot(MODEL, "interactive"):
        pass  # a pooled connection now exists: the silent server will not refuse it
    ns.drop()
    sent = []
    with caplog.at_level(logging.WARNING), timed() as elapsed, limiter.slot(MODEL, "interactive"):
        sent.append("call")
    # The call went out without the limiter, after one socket timeout for the slot and one
    # for its report: never a hang.
    assert sent == ["call"]
    assert elapsed[0] < 2 * settings.redis_socket_timeout_s + 1.5
    assert "provider limiter unavailable; calling without it" in caplog.text


def test_a_silent_redis_does_not_hang_the_reaper(
    silent_redis: tuple[NetworkNamespace, Settings], db: Database
) -> None:
    ns, settings = silent_redis
    run = new_run(db)
    assert runs.claim_step(db, run.run_id, STEP1, owner="dead", lease_s=0.2) is not None
    time.sleep(0.3)
    ns.drop()
    with timed() as elapsed:
        recovered = recover_stalled_work(
            db,
            redis_client(settings),
            grace_s=1,
            lease_s=0.5,
            webhook_retry=RetryPolicy.from_settings(settings),
        )
    # The expired lease is handed on from PostgreSQL alone; lost messages wait for Redis.
    assert (recovered.expired_leases, recovered.lost_messages) == (1, 0)
    assert elapsed[0] < settings.redis_socket_timeout_s + 1.5


@contextmanager
def celery_broker(settings: Settings) -> Iterator[CeleryPublisher]:
    """docpipe's Celery app publishing to ``settings.redis_url`` with their timeouts."""
    keys = ("broker_transport_options", "broker_connection_timeout")
    saved = {key: app.conf[key] for key in keys}
    previous = app.conf.broker_url
    app.conf.update({key: transport_config(settings)[key] for key in keys})
    use_celery_broker(settings.redis_url)
    try:
        yield CeleryPublisher()
    finally:
        app.conf.update(saved)
        use_celery_broker(previous)


def test_a_silent_redis_does_not_hang_publishing(
    silent_redis: tuple[NetworkNamespace, Settings], db: Database
) -> None:
    ns, settings = silent_redis
    first, second = new_run(db, key="k-1"), new_run(db, document_id="doc-2", key="k-2")
    with celery_broker(settings) as publisher:
        assert publish_outbox(db, publisher, first.outbox_ids) == 1  # connection now pooled
        ns.drop()
        with timed() as elapsed:
            published = publish_outbox(db, publisher, second.outbox_ids)
    # Given up after three tries of a connect/socket timeout each (the retry policy), and
    # left in the outbox for beat's sweep.
    assert published == 0
    assert unpublished(db) == 1
    per_try = settings.redis_connect_timeout_s + settings.redis_socket_timeout_s
    assert elapsed[0] < 3 * per_try + 2


def test_a_silent_postgresql_costs_a_statement_its_socket_timeout_not_a_hang() -> None:
    with service_dir("silent-pg") as data, NetworkNamespace() as ns:
        url = postgres_in(ns, data)
        timeouts = Timeouts(connect_s=2, socket_s=2.0, statement_s=5.0, lock_s=1.0, pool_s=3.0)
        wait_until(lambda: _pg_answers(url), timeout_s=30)
        db = Database(url, max_size=1, timeouts=timeouts)
        try:
            with db.session() as s:
                s.conn.execute("SELECT 1")  # a pooled connection exists now
            ns.drop()
            with timed() as elapsed, pytest.raises(psycopg.OperationalError), db.session() as s:
                s.conn.execute("SELECT 1")
            # Data sent and never acknowledged: the kernel closes the socket after
            # tcp_user_timeout.
            assert elapsed[0] < timeouts.socket_s + 3
            # A new connection cannot even be made: the pool gives up after its timeout.
            with timed() as elapsed, pytest.raises(psycopg.OperationalError), db.session() as s:
                s.conn.execute("SELECT 1")
            assert elapsed[0] < timeouts.pool_s + 3
        finally:
            db.close()


def test_the_session_of_a_client_cut_off_from_postgresql_ends_with_its_locks() -> None:
    """A worker partitioned away while it holds a session advisory lock (a periodic job's,
    its lease session's): the server's own keepalives end the session within about the
    socket timeout, and the lock with it, instead of the kernel's two hours."""
    with service_dir("cut-off-pg") as data, NetworkNamespace() as ns:
        url = postgres_in(ns, data)
        timeouts = Timeouts(connect_s=2, socket_s=2.0, statement_s=5.0, lock_s=1.0, pool_s=3.0)
        wait_until(lambda: _pg_answers(url), timeout_s=30)
        db = Database(url, max_size=1, timeouts=timeouts)
        try:
            with db.session() as s:
                s.conn.execute("SELECT pg_advisory_lock(4242)")
                assert _lock_holders(url) == 1
                ns.drop()  # nothing more is sent: only keepalives can notice
                time.sleep(2 * timeouts.socket_s + 2)
                ns.heal()
                assert _lock_holders(url) == 0, "the cut-off client's session ended"
        finally:
            db.close()


def _lock_holders(url: str) -> int:
    """Sessions holding advisory lock 4242, asked on a connection of its own."""
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _pg_answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False
