"""Beat's gauges of the review queue, read from a real PostgreSQL: runs awaiting a person
and the oldest one's wait per tenant and pipeline, beside the limit the alert compares with."""

from __future__ import annotations

from typing import Any

from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.worker.state_collector import StateCollector
from docpipe_dev.localstack import LocalRedis
from tests.support.factories import new_run


def paused(
    db: Database, key: str, tenant: str, waited_s: int, status: str = "needs_review"
) -> None:
    run_id = new_run(db, key=key, document_id=key, tenant_id=tenant).run_id
    with db.session() as s:
        s.conn.execute(
            b"UPDATE pipeline_run SET status = %s, review_step = 'extract_fields',"
            b" review_reason = 'rule', review_since = now() - make_interval(secs => %s)"
            b" WHERE id = %s",
            (status, waited_s, run_id),
        )


def samples(collector: StateCollector, name: str) -> dict[tuple[str, ...], float]:
    found: dict[tuple[str, ...], float] = {}
    for family in collector.collect():
        for sample in family.samples:
            if sample.name == name:
                labels: dict[str, Any] = sample.labels
                found[tuple(labels[k] for k in sorted(labels))] = sample.value
    return found


def test_the_review_backlog_per_tenant_and_pipeline_and_its_oldest_wait(
    db: Database, settings: Settings, redis_server: LocalRedis
) -> None:
    paused(db, "a1", "acme", waited_s=7200)
    paused(db, "a2", "acme", waited_s=60)
    paused(db, "g1", "globex", waited_s=30)
    paused(db, "done", "globex", waited_s=99999, status="done")  # decided: not waiting
    limited = settings.model_copy(
        update={"redis_url": redis_server.url, "review_max_wait_s": 3600.0}
    )
    collector = StateCollector(limited, min_interval_s=0)
    try:
        pipeline = "document_extract:v1"
        assert samples(collector, "docpipe_review_backlog_runs") == {
            (pipeline, "acme"): 2,
            (pipeline, "globex"): 1,
        }
        oldest = samples(collector, "docpipe_review_oldest_age_seconds")
        assert set(oldest) == {(pipeline, "acme"), (pipeline, "globex")}
        assert 7200 <= oldest[pipeline, "acme"] < 7260
        assert 30 <= oldest[pipeline, "globex"] < 90
        assert samples(collector, "docpipe_review_max_wait_seconds") == {(): 3600.0}
    finally:
        collector.close()
