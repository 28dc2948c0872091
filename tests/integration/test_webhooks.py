"""Webhooks against real PostgreSQL, Redis, workers and beat: each tenant's own secret,
Standard Webhooks signatures, destinations refused after resolution and recorded as refused,
the deadline, interrupted attempts recorded and retried, lost messages re-sent, their own
queue and the limits on attempts in flight."""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from celery.exceptions import SoftTimeLimitExceeded
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from pydantic import SecretStr
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from docpipe.broker.queues import PERIODIC_QUEUE, WEBHOOK_QUEUE, sub_lists
from docpipe.broker.transport import CeleryPublisher
from docpipe.settings import Settings
from docpipe.state import webhooks
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox
from docpipe.state.webhook_secrets import rotate_secret
from docpipe.statuses import DeliveryStatus
from docpipe.worker.webhook_delivery import deliver_webhook
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support.factories import new_run, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until
from tests.support.receivers import raw_receiver, recording_receiver, stub_resolver

SECRETS_KEY = Fernet.generate_key().decode()
CONTRACT = sample_contracts(1)[0]
WEBHOOK_ENV = {
    "DOCPIPE_WEBHOOKS_ENABLED": "true",
    "DOCPIPE_SECRETS_KEY": SECRETS_KEY,
    "DOCPIPE_WEBHOOK_RETRY_BASE_S": "0.2",
}
LOCAL_RECEIVERS = {"DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS": "127.0.0.1/32"}
API_WEBHOOKS = {"webhooks_enabled": "true", "secrets_key": SECRETS_KEY}


@pytest.fixture
def hook_settings(settings: Settings) -> Settings:
    """In-process settings with webhooks on, receivers on 127.0.0.1 allowed, a short
    deadline and quick retries."""
    return settings.model_copy(
        update={
            "webhooks_enabled": True,
            "secrets_key": SecretStr(Fernet.generate_key().decode()),
            "webhook_allowed_destinations": (ipaddress.ip_network("127.0.0.1/32"),),
            "webhook_timeout_s": 1.0,
            "webhook_retry_base_s": 0.05,
        }
    )


def secret_for(db: Database, settings: Settings, tenant: str, window_s: float = 60) -> str:
    key = settings.secrets_key.get_secret_value()
    return rotate_secret(db, key, tenant, previous_valid_for_s=window_s).plaintext


def ended_run_with_webhook(db: Database, url: str, tenant: str = "acme", key: str = "k1") -> int:
    """A run that ended with ``url`` as its callback; returns its queued delivery's id."""
    run = new_run(db, tenant_id=tenant, key=key, document_id=f"doc-{key}", callback_url=url)
    with db.session() as s:
        s.conn.execute(
            b"UPDATE pipeline_run SET status = 'done', finished_at = now() WHERE id = %s",
            (run.run_id,),
        )
    webhooks.queue_webhooks(db, WEBHOOK_QUEUE)
    return int(scalar(db, "SELECT id FROM webhook_delivery WHERE run_id = %s", run.run_id))


def delivery(db: Database, delivery_id: int) -> dict[str, Any]:
    with db.session() as s:
        row = s.conn.execute(
            b"SELECT * FROM webhook_delivery WHERE id = %s", (delivery_id,)
        ).fetchone()
    assert row is not None
    return dict(row)


def make_due(db: Database, delivery_id: int) -> None:
    """Skip the backoff wait of the delivery's next attempt."""
    with db.session() as s:
        s.conn.execute(
            b"UPDATE webhook_delivery SET next_attempt_at = now() WHERE id = %s", (delivery_id,)
        )


def verify(secret: str, received: Any) -> Any:
    return Webhook(secret).verify(received.body, received.headers)


# --- secrets: made by docpipe, shown once, rotated ------------------------------------------


def test_the_secret_is_shown_once_and_a_rotation_keeps_the_previous_one_for_the_window(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client(**API_WEBHOOKS)
    assert client.get("/webhook-secret").status_code == 404
    first = client.post("/webhook-secret")
    assert first.status_code == 201, first.text
    assert first.headers["Cache-Control"] == "no-store"
    body = first.json()
    assert body["secret"].startswith("whsec_") and body["previous"] is None
    shown = client.get("/webhook-secret").json()
    assert "secret" not in shown and body["secret"] not in json.dumps(shown)
    assert shown["current"]["id"] == body["current"]["id"]

    rotated = client.post("/webhook-secret", params={"previous_valid_for_s": 3600}).json()
    assert rotated["secret"] != body["secret"]
    assert rotated["previous"]["id"] == body["current"]["id"]
    until = datetime.fromisoformat(rotated["previous"]["expires_at"])
    assert timedelta(minutes=59) < until - datetime.now(UTC) <= timedelta(hours=1)
    assert client.get("/webhook-secret").json()["previous"]["id"] == body["current"]["id"]

    # A leaked secret is revoked at once: window 0.
    client.post("/webhook-secret", params={"previous_valid_for_s": 0})
    assert client.get("/webhook-secret").json()["previous"] is None
    assert client.post("/webhook-secret", params={"previous_valid_for_s": -1}).status_code == 422


def test_a_deployment_without_webhooks_makes_no_secret_and_takes_no_callback_url(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client()
    refused = client.post("/webhook-secret")
    assert refused.status_code == 409 and "DOCPIPE_WEBHOOKS_ENABLED" in refused.json()["detail"]
    client.put("/documents/d1", content=b"TITLE\nText.\n", headers={"Content-Type": "text/plain"})
    answer = client.post("/documents/d1/extract", json={"callback_url": "https://example.com/h"})
    assert answer.status_code == 409 and "sends no webhooks" in answer.json()["detail"]


def test_a_callback_url_needs_the_tenants_secret_first(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(**API_WEBHOOKS)
    client.put("/documents/d1", content=b"TITLE\nText.\n", headers={"Content-Type": "text/plain"})
    options = {"callback_url": "https://example.com/hook"}
    refused = client.post("/documents/d1/extract", json=options)
    assert refused.status_code == 409
    assert "POST /webhook-secret" in refused.json()["detail"]
    batch = {"documents": [{"id": "d1"}], **options}
    assert client.post("/batches", json=batch).status_code == 409
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 0, "a refusal changes nothing"
    client.post("/webhook-secret")
    assert client.post("/documents/d1/extract", json=options).status_code == 202
    assert client.post("/batches", json=batch).status_code == 202


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://0x7f000001/",
        "http://2130706433/",
        "http://127.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data",
        "http://localhost:5432/",
        "http://user:pw@example.com/hook",
        "http://10.0.0.5/",
    ],
)
def test_a_callback_url_to_an_internal_address_is_refused_at_submission(
    make_api_client: Callable[..., TestClient], db: Database, url: str
) -> None:
    client = make_api_client(**API_WEBHOOKS)
    client.post("/webhook-secret")
    client.put("/documents/d1", content=b"TITLE\nText.\n", headers={"Content-Type": "text/plain"})
    answer = client.post("/documents/d1/extract", json={"callback_url": url})
    assert answer.status_code == 403, answer.text
    assert answer.json()["detail"].startswith("callback_url")
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 0


# --- signatures ------------------------------------------------------------------------------


def test_a_delivery_verifies_with_its_tenants_secret_and_not_with_another_tenants(
    db: Database, hook_settings: Settings
) -> None:
    acme = secret_for(db, hook_settings, "acme")
    globex = secret_for(db, hook_settings, "globex")
    with recording_receiver() as (url, handler):
        delivery_id = ended_run_with_webhook(db, url, tenant="acme")
        assert deliver_webhook(db, hook_settings, delivery_id) == DeliveryStatus.DELIVERED
    received = handler.received[0]
    event = verify(acme, received)
    assert (event["event"], event["status"]) == ("run.ended", "done")
    assert received.headers["webhook-id"] == delivery(db, delivery_id)["message_id"]
    with pytest.raises(WebhookVerificationError):
        verify(globex, received)
    tampered = type(received)(received.headers, received.body.replace(b"done", b"fail"))
    with pytest.raises(WebhookVerificationError):
        verify(acme, tampered)


def test_during_a_rotation_window_both_secrets_sign_then_only_the_new_one(
    db: Database, hook_settings: Settings
) -> None:
    old = secret_for(db, hook_settings, "acme")
    new = secret_for(db, hook_settings, "acme", window_s=3600)
    with recording_receiver() as (url, handler):
        deliver_webhook(db, hook_settings, ended_run_with_webhook(db, url, key="k1"))
        newest = secret_for(db, hook_settings, "acme", window_s=0)  # `new` revoked at once
        deliver_webhook(db, hook_settings, ended_run_with_webhook(db, url, key="k2"))
    during, after = handler.received
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    verify(old, during)
    verify(new, during)
    verify(newest, after)
    for revoked in (old, new):
        with pytest.raises(WebhookVerificationError):
            verify(revoked, after)


# --- destinations refused at delivery ------------------------------------------------------


def test_a_dns_name_resolving_to_a_private_address_is_refused_and_recorded(
    db: Database, hook_settings: Settings
) -> None:
    secret_for(db, hook_settings, "acme")
    delivery_id = ended_run_with_webhook(db, "https://hooks.example.test/h")
    resolver = stub_resolver({"hooks.example.test": ["10.20.30.40"]})
    assert deliver_webhook(db, hook_settings, delivery_id, resolver=resolver) == "pending"
    row = delivery(db, delivery_id)
    assert (row["attempts"], row["last_status"], row["last_error"]) == (
        1,
        None,
        webhooks.REFUSED,
    )


def test_a_stored_url_naming_localhost_is_refused_through_the_real_resolver(
    db: Database, hook_settings: Settings
) -> None:
    # A URL the API would refuse today, stored before the check existed.
    secret_for(db, hook_settings, "acme")
    with recording_receiver() as (url, handler):
        local_name = url.replace("127.0.0.1", "localhost")
        delivery_id = ended_run_with_webhook(db, local_name)
        deliver_webhook(
            db, hook_settings.model_copy(update={"webhook_allowed_destinations": ()}), delivery_id
        )
    assert handler.received == []
    assert delivery(db, delivery_id)["last_error"] == webhooks.REFUSED


def test_a_receiver_on_127_0_0_1_is_refused_without_the_allowlist_and_recorded_as_refused(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    # The API accepts the receiver (its allowlist names it); the workers' has no allowlist.
    client = make_api_client(**API_WEBHOOKS, webhook_allowed_destinations="127.0.0.1/32")
    client.post("/webhook-secret")
    with recording_receiver() as (url, handler):
        client.put(
            "/documents/d1",
            content=b"TITLE\nIntro.\n1. ONE\nText.\n",
            headers={"Content-Type": "text/plain"},
        )
        run_id = client.post("/documents/d1/extract", json={"callback_url": url}).json()["run_id"]
        no_allowlist = {**WEBHOOK_ENV, "DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS": ""}
        start_worker(**no_allowlist)
        start_beat(**no_allowlist)
        wait_until(lambda: client.get(f"/runs/{run_id}").json()["webhook"], 60)
        wait_until(lambda: client.get(f"/runs/{run_id}").json()["webhook"]["attempts"] >= 1, 60)
        webhook = client.get(f"/runs/{run_id}").json()["webhook"]
    assert handler.received == [], "nothing reached the receiver"
    assert webhook["status"] == "pending" and webhook["next_attempt_at"] is not None
    assert (webhook["last_status"], webhook["last_error"]) == (None, webhooks.REFUSED)


# --- deadline, interruptions, lost messages ------------------------------------------------


def test_a_receiver_that_never_answers_is_cut_off_at_the_deadline_and_retried(
    db: Database,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    env = {
        **WEBHOOK_ENV,
        **LOCAL_RECEIVERS,
        "DOCPIPE_WEBHOOK_TIMEOUT_S": "1",
        "DOCPIPE_WEBHOOK_MAX_ATTEMPTS": "3",
    }
    rotate_secret(db, SECRETS_KEY, "acme", previous_valid_for_s=0)
    with raw_receiver("hang") as receiver:
        delivery_id = ended_run_with_webhook(db, receiver.url)
        start_worker(**env)
        start_beat(**env)
        wait_until(lambda: delivery(db, delivery_id)["status"] == "failed", timeout_s=90)
        wait_until(lambda: len(receiver.closed()) == 3, timeout_s=10)
    row = delivery(db, delivery_id)
    assert (row["attempts"], row["last_error"]) == (3, webhooks.TIMEOUT)
    assert len(receiver.connections) == 3, "each attempt connected once, and was retried"
    assert all(c.bytes_received > 0 for c in receiver.connections), "the request was sent"


def test_an_attempt_interrupted_by_the_soft_time_limit_is_recorded_and_retried(
    db: Database, hook_settings: Settings
) -> None:
    secret_for(db, hook_settings, "acme")

    async def interrupted(host: str, port: int) -> list[Any]:
        raise SoftTimeLimitExceeded()

    with recording_receiver() as (url, handler):
        delivery_id = ended_run_with_webhook(db, url)
        with pytest.raises(SoftTimeLimitExceeded):
            deliver_webhook(db, hook_settings, delivery_id, resolver=interrupted)
        row = delivery(db, delivery_id)
        assert (row["status"], row["attempts"], row["last_error"]) == (
            "pending",
            1,
            webhooks.INTERRUPTED,
        )
        assert row["attempt_expires_at"] is None
        parked = scalar(
            db,
            "SELECT count(*) FROM outbox WHERE topic = 'webhook' AND published_at IS NULL"
            " AND available_at = %s",
            row["next_attempt_at"],
        )
        assert parked == 1, "the next attempt is parked in the outbox"
        make_due(db, delivery_id)
        assert deliver_webhook(db, hook_settings, delivery_id) == DeliveryStatus.DELIVERED
    assert delivery(db, delivery_id)["attempts"] == 2 and len(handler.received) == 1


def test_an_attempt_whose_worker_was_killed_is_recorded_by_the_reaper_and_retried(
    db: Database,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    # Short limits so that the dead attempt's lease (the task's hard limit, which the reaper
    # waits out) ends soon: 6.5 s keeps the soft limit plus the provider's timeout below it.
    env = {
        **WEBHOOK_ENV,
        **LOCAL_RECEIVERS,
        "DOCPIPE_LLM_TIMEOUT_S": "2",
        "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "4",
        "DOCPIPE_TASK_TIME_LIMIT_S": "6.5",
        "DOCPIPE_WEBHOOK_TIMEOUT_S": "3",
        "DOCPIPE_LIMITER_MAX_WAIT_S": "2",
        # Every client gives up before that soft limit (the client-timeout rule).
        "DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S": "3",
        "DOCPIPE_DATABASE_LOCK_TIMEOUT_S": "3",
        "DOCPIPE_DATABASE_SOCKET_TIMEOUT_S": "3",
        "DOCPIPE_DATABASE_POOL_TIMEOUT_S": "3",
        "DOCPIPE_DATABASE_CONNECT_TIMEOUT_S": "2",
        "DOCPIPE_REDIS_SOCKET_TIMEOUT_S": "3",
    }
    rotate_secret(db, SECRETS_KEY, "acme", previous_valid_for_s=0)
    with raw_receiver("hang-once") as receiver:
        delivery_id = ended_run_with_webhook(db, receiver.url)
        worker = start_worker(**env)
        start_beat(**env)
        wait_until(lambda: receiver.connections, timeout_s=60)
        assert delivery(db, delivery_id)["attempt_expires_at"] is not None, "claimed"
        worker.kill_group()  # SIGKILL mid-attempt: nothing in the worker records it
        start_worker(**env)
        wait_until(lambda: delivery(db, delivery_id)["status"] == "delivered", timeout_s=90)
    row = delivery(db, delivery_id)
    assert row["attempts"] == 2, "the killed attempt was counted"
    assert len(receiver.connections) == 2


def test_a_delivery_whose_message_redis_lost_is_sent_again_by_the_reaper(
    db: Database,
    broker: redis.Redis,
    publisher: CeleryPublisher,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    rotate_secret(db, SECRETS_KEY, "acme", previous_valid_for_s=0)
    with recording_receiver() as (url, handler):
        run = new_run(db, callback_url=url)
        with db.session() as s:
            s.conn.execute(
                b"UPDATE pipeline_run SET status = 'done', finished_at = now() WHERE id = %s",
                (run.run_id,),
            )
        outbox_ids = webhooks.queue_webhooks(db, WEBHOOK_QUEUE)
        assert publish_outbox(db, publisher, outbox_ids) == 1
        assert broker.llen(WEBHOOK_QUEUE) == 1, "webhooks have their own queue"
        assert sum(broker.llen(name) for name in sub_lists(PERIODIC_QUEUE)) == 0
        broker.flushall()  # Redis restarted empty: the message is gone, the outbox says sent
        start_worker(**WEBHOOK_ENV, **LOCAL_RECEIVERS)
        start_beat(**WEBHOOK_ENV, **LOCAL_RECEIVERS)
        wait_until(lambda: handler.received, timeout_s=60)
    delivered = scalar(db, "SELECT status FROM webhook_delivery")
    assert delivered == "delivered"
    assert scalar(db, "SELECT count(*) FROM outbox WHERE topic = 'webhook'") == 2, "re-sent once"


# --- limits on attempts in flight ------------------------------------------------------------


def test_a_tenant_has_at_most_its_share_of_attempts_in_flight_and_everyone_the_total(
    db: Database, hook_settings: Settings
) -> None:
    ids = {
        tenant: [
            ended_run_with_webhook(db, "https://example.com/h", tenant=tenant, key=f"{tenant}-{i}")
            for i in range(4)
        ]
        for tenant in ("acme", "globex")
    }
    claims: dict[int, webhooks.Claim] = {}

    def claim(delivery_id: int) -> None:
        claims[delivery_id] = webhooks.claim_attempt(
            db, delivery_id, lease_s=60, tenant_limit=2, limit=3, queue=WEBHOOK_QUEUE
        )

    # acme's four claims race each other; the claim lock lets exactly two through.
    threads = [threading.Thread(target=claim, args=(i,)) for i in ids["acme"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    acme = [claims[i] for i in ids["acme"]]
    assert sum(c.attempt is not None for c in acme) == 2
    assert sorted(str(c.refusal) for c in acme if c.attempt is None) == ["busy", "busy"]
    # globex gets one place: the total of three is reached.
    for delivery_id in ids["globex"][:2]:
        claim(delivery_id)
    assert [claims[i].refusal for i in ids["globex"][:2]] == [None, "busy"]
    # A busy delivery is parked, not attempted: its attempts stay at zero.
    busy = next(i for i in ids["acme"] if claims[i].attempt is None)
    assert delivery(db, busy)["attempts"] == 0
    assert delivery(db, busy)["next_attempt_at"] > datetime.now(UTC)
    # A duplicate message of an attempt in flight does nothing.
    in_flight = next(i for i in ids["acme"] if claims[i].attempt is not None)
    claim(in_flight)
    assert claims[in_flight].refusal == "in_flight"


# --- reviews ---------------------------------------------------------------------------------


def test_a_run_paused_for_review_sends_run_needs_review_then_run_ended_after_the_decision(
    make_api_client: Callable[..., TestClient],
    db: Database,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    client = make_api_client(**API_WEBHOOKS, webhook_allowed_destinations="127.0.0.1/32")
    secret = client.post("/webhook-secret").json()["secret"]
    fake_llm.add_fault("invented_quote", count=100, step="extract_fields")
    decisions = (
        "docpipe_review_decisions_total",
        {"pipeline": "document_extract:v1", "action": "approve"},
    )
    decided_before = REGISTRY.get_sample_value(*decisions) or 0.0
    with recording_receiver() as (url, handler):
        client.put(
            "/documents/c1", content=CONTRACT.text.encode(), headers={"Content-Type": "text/plain"}
        )
        run_id = client.post("/documents/c1/extract", json={"callback_url": url}).json()["run_id"]
        start_worker(**WEBHOOK_ENV, **LOCAL_RECEIVERS)
        start_beat(**WEBHOOK_ENV, **LOCAL_RECEIVERS)
        wait_until(lambda: len(handler.received) == 1, timeout_s=90)
        paused = verify(secret, handler.received[0])
        assert (paused["event"], paused["run_id"], paused["status"]) == (
            "run.needs_review",
            run_id,
            "needs_review",
        )
        assert (paused["review"]["step"], paused["review"]["reason"]) == ("extract_fields", "rule")
        assert paused["review"]["reasons"][0]["kind"] == "unsupported_evidence"
        fake_llm.reset()
        decision = {"revision": paused["review"]["revision"], "action": "approve"}
        assert client.post(f"/runs/{run_id}/review", json=decision).status_code == 200
        wait_until(lambda: len(handler.received) == 2, timeout_s=90)
    ended = verify(secret, handler.received[1])
    assert (ended["event"], ended["status"], ended["review"]) == ("run.ended", "done", None)
    assert ended["steps_done"] == ended["steps_total"] == 4
    ids = [r.headers["webhook-id"] for r in handler.received]
    assert ids[0] != ids[1], "two events, two messages"
    assert REGISTRY.get_sample_value(*decisions) == decided_before + 1, "the decision counted"
