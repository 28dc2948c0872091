"""Beat's gauges of the provider-batch lane, read from a real PostgreSQL: provider batches by
state, calls waiting (not yet packed, or packed) per model, and the oldest wait the alert
DocpipeProviderBatchPastWindow compares with a provider's window."""

from __future__ import annotations

from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.worker.state_collector import StateCollector
from docpipe_dev.localstack import LocalRedis
from tests.observability.test_review_metrics import samples
from tests.support.factories import new_run


def waiting_call(db: Database, call_id: int, model: str, state: str, waited_s: int) -> None:
    run_id = new_run(db, key=f"r{call_id}", document_id=f"d{call_id}").run_id
    with db.session() as s:
        s.conn.execute(
            b"INSERT INTO provider_batch_call (call_id, run_id, step, generation, call_key,"
            b" tenant_id, provider, model, state, body_z, created_at)"
            b" VALUES (%s, %s, 'extract_sections', 0, 'sections', 'acme', 'openai', %s, %s,"
            b" '\\x00', now() - make_interval(secs => %s))",
            (call_id, run_id, model, state, waited_s),
        )


def test_provider_batches_calls_waiting_and_the_oldest_wait(
    db: Database, settings: Settings, redis_server: LocalRedis
) -> None:
    with db.session() as s:
        s.conn.execute(
            b"INSERT INTO provider_batch (provider, model, state, requests, bytes, ended_at)"
            b" VALUES ('openai', 'gpt-4o-mini', 'submitted', 2, 100, NULL),"
            b" ('openai', 'gpt-4o-mini', 'completed', 5, 100, now() - interval '1 hour'),"
            b" ('openai', 'gpt-4o-mini', 'completed', 5, 100, now() - interval '3 days')"
        )
    waiting_call(db, 1, "gpt-4o-mini", "waiting", 30)
    waiting_call(db, 2, "gpt-4o-mini", "packed", 7200)
    waiting_call(db, 3, "gpt-4o-mini", "packed", 60)
    waiting_call(db, 4, "gpt-4o", "applied", 99999)  # answered and used: not waiting
    collector = StateCollector(
        settings.model_copy(update={"redis_url": redis_server.url}), min_interval_s=0
    )
    try:
        assert samples(collector, "docpipe_provider_batches") == {
            ("openai", "submitted"): 1,
            ("openai", "completed"): 1,  # ended within the day
        }
        assert samples(collector, "docpipe_provider_batch_calls_waiting") == {
            ("gpt-4o-mini", "openai", "waiting"): 1,
            ("gpt-4o-mini", "openai", "packed"): 2,
        }
        oldest = samples(collector, "docpipe_provider_batch_oldest_wait_seconds")
        assert set(oldest) == {("gpt-4o-mini", "openai")}
        assert 7200 <= oldest["gpt-4o-mini", "openai"] < 7260
    finally:
        collector.close()
