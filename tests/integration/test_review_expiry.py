"""The review backlog's own retention: with DOCPIPE_REVIEW_EXPIRE_AFTER_S set, a run that has
awaited a person longer ends as expired, says so in its webhook and is counted; unset (the
default), a review waits however long it takes."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from docpipe.observability import metrics
from docpipe.settings import Settings
from docpipe.state.db import Database, Row, Session
from docpipe.state.retention import expire_reviews
from tests.support.factories import new_run, scalar

PIPELINE = "document_extract:v1"


def paused(db: Database, key: str, waited_s: int, callback_url: str | None = None) -> str:
    run_id = new_run(db, key=key, document_id=key).run_id
    with db.session() as s:
        s.conn.execute(
            b"UPDATE pipeline_run SET status = 'needs_review', review_step = 'extract_fields',"
            b" review_reason = 'rule', review_reasons = '[]', review_revision = 1,"
            b" review_since = now() - make_interval(secs => %s), finished_at = now(),"
            b" callback_url = %s, notified_at = now() WHERE id = %s",
            (waited_s, callback_url, run_id),
        )
    return run_id


def test_by_default_a_review_waits_however_long_it_takes(db: Database, settings: Settings) -> None:
    run_id = paused(db, "a-year", waited_s=365 * 86_400)
    assert settings.review_expire_after_s == 0
    assert expire_reviews(db, settings) == {}
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id) == "needs_review"


def test_a_review_past_its_age_expires_with_its_webhook_and_its_count(
    db: Database, settings: Settings
) -> None:
    old = paused(db, "old", waited_s=7_200, callback_url="https://hooks.example.com/runs")
    young = paused(db, "young", waited_s=600)
    counted = ("docpipe_reviews_expired_total", {"pipeline": PIPELINE})
    before = REGISTRY.get_sample_value(*counted) or 0.0

    expired = expire_reviews(db, settings.model_copy(update={"review_expire_after_s": 3_600.0}))
    metrics.count_expired_reviews(expired)

    assert expired == {PIPELINE: 1}
    assert REGISTRY.get_sample_value(*counted) == before + 1
    with db.session() as s:
        row = s.conn.execute(
            b"SELECT status, error, review_step, review_since, review_revision, finished_at"
            b" > now() - interval '1 minute' AS ended_now FROM pipeline_run WHERE id = %s",
            (old,),
        ).fetchone()
    assert row is not None
    assert (row["status"], row["review_step"], row["review_since"]) == ("expired", None, None)
    assert row["error"] == "the review of extract_fields was not answered within 01:00:00"
    assert row["review_revision"] == 2 and row["ended_now"]  # a decision on revision 1 is stale
    assert scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", young) == "needs_review"
    # Its caller hears that the run ended, and how.
    assert len(db.all("queue_run_webhooks", queue="webhooks")) == 1
    payload = scalar(db, "SELECT payload FROM webhook_delivery WHERE run_id = %s", old)
    assert (payload["event"], payload["status"]) == ("run.ended", "expired")
    assert payload["error"].startswith("the review of extract_fields")
    # Nothing is left to expire.
    assert expire_reviews(db, settings.model_copy(update={"review_expire_after_s": 3_600.0})) == {}


def test_reviews_expire_a_small_batch_at_a_time_whatever_the_statistics_say(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement ends at most retention_batch_size runs, also when the statistics say
    the table is nearly empty (retention.sql's header says what went wrong then)."""
    paused(db, "r0", waited_s=7_200)
    with db.session() as s:
        s.conn.execute(b"ANALYZE pipeline_run")  # one run: a nearly empty table
    for i in range(1, 5):
        paused(db, f"r{i}", waited_s=7_200)
    batches: list[int] = []
    run_query = Session.all

    def spy(self: Session, query: str, **params: Any) -> list[Row]:
        rows = run_query(self, query, **params)
        batches.append(len(rows))
        return rows

    monkeypatch.setattr(Session, "all", spy)
    expiring = {"review_expire_after_s": 3_600.0, "retention_batch_size": 2}
    assert expire_reviews(db, settings.model_copy(update=expiring)) == {PIPELINE: 5}
    assert batches == [2, 2, 1]
