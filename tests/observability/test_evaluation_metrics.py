"""Beat's gauge of quality, read from a real PostgreSQL: the overall accuracy of the latest
reported evaluation of each pipeline version on each evaluation set, per tenant."""

from __future__ import annotations

import uuid

from psycopg.types.json import Jsonb

from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.worker.state_collector import StateCollector
from docpipe_dev.localstack import LocalRedis
from tests.observability.test_review_metrics import samples


def evaluation_set(db: Database, tenant: str, name: str) -> str:
    set_id = str(uuid.uuid4())
    with db.session() as s:
        s.conn.execute(
            b"INSERT INTO evaluation_set (id, tenant_id, name, pipeline, step, version, items)"
            b" VALUES (%s, %s, %s, 'document_extract', 'extract_fields', 1, 20)",
            (set_id, tenant, name),
        )
    return set_id


def evaluation(
    db: Database, tenant: str, set_id: str, pipeline: str, accuracy: float | None, age_s: int
) -> None:
    """An evaluation reported ``age_s`` seconds ago (``accuracy`` None: still running)."""
    report = None if accuracy is None else Jsonb({"overall": {"accuracy": accuracy}})
    with db.session() as s:
        s.conn.execute(
            b"INSERT INTO evaluation (id, tenant_id, set_id, set_version, pipeline, step,"
            b" batch_id, report, reported_at)"
            b" VALUES (%s, %s, %s, 1, %s, 'extract_fields', %s, %s,"
            b" CASE WHEN %s THEN now() - make_interval(secs => %s) END)",
            (
                uuid.uuid4(),
                tenant,
                set_id,
                pipeline,
                uuid.uuid4(),
                report,
                report is not None,
                age_s,
            ),
        )


def test_the_latest_accuracy_of_each_pipeline_version_on_each_set(
    db: Database, settings: Settings, redis_server: LocalRedis
) -> None:
    contracts = evaluation_set(db, "acme", "contracts")
    other = evaluation_set(db, "acme", "leases")
    theirs = evaluation_set(db, "globex", "contracts")
    evaluation(db, "acme", contracts, "document_extract:v1", 0.91, age_s=3600)
    evaluation(db, "acme", contracts, "document_extract:v1", 0.87, age_s=60)  # the latest
    evaluation(db, "acme", contracts, "document_extract:v1", None, age_s=0)  # still running
    evaluation(db, "acme", contracts, "document_extract:v2", 0.95, age_s=600)
    evaluation(db, "acme", other, "document_extract:v1", 0.5, age_s=600)
    evaluation(db, "globex", theirs, "document_extract:v1", 0.7, age_s=600)
    collector = StateCollector(
        settings.model_copy(update={"redis_url": redis_server.url}), min_interval_s=0
    )
    try:
        # Labels in the order of their names: pipeline, set, step, tenant.
        assert samples(collector, "docpipe_evaluation_accuracy") == {
            ("document_extract:v1", "contracts", "extract_fields", "acme"): 0.87,
            ("document_extract:v2", "contracts", "extract_fields", "acme"): 0.95,
            ("document_extract:v1", "leases", "extract_fields", "acme"): 0.5,
            ("document_extract:v1", "contracts", "extract_fields", "globex"): 0.7,
        }
    finally:
        collector.close()
