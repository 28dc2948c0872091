"""The review queue as a reviewer works through it, on real PostgreSQL: its counts by
pipeline and reason, its orders (oldest first, by pipeline, by reason), the next review
after a decision, each within one tenant and its filters."""

from __future__ import annotations

import pytest

from docpipe.errors import InvalidRequestError
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.review_queue import QueueOrder, next_review, queue_counts, queue_page
from docpipe.state.reviews import QueueFilter
from docpipe.statuses import RunStatus
from tests.support.factories import TENANT, new_run

ANY = QueueFilter()


def paused(db: Database, name: str, reason: str, tenant_id: str = TENANT) -> str:
    """A run of document_extract:v1 waiting for a person at extract_sections."""
    run = new_run(db, document_id=name, key=name, tenant_id=tenant_id)
    claim = runs.claim_step(db, run.run_id, "extract_sections", owner="test", lease_s=30)
    assert claim is not None
    assert runs.fail_run(
        db,
        run.run_id,
        "extract_sections",
        owner="test",
        status=RunStatus.NEEDS_REVIEW,
        error=f"{reason} for {name}",
        review_reason=reason,
    )
    return run.run_id


def test_counts_orders_and_the_next_review(db: Database) -> None:
    first = paused(db, "a", "invalid_output")
    second = paused(db, "b", "attempts_exhausted")
    third = paused(db, "c", "invalid_output")
    paused(db, "d", "invalid_output", tenant_id="globex")  # another tenant's: never seen

    counts = queue_counts(db, TENANT, QueueFilter())
    assert (counts.waiting, counts.capped) == (3, False)
    assert counts.by_pipeline == {"document_extract:v1": 3}
    assert counts.by_reason == {"invalid_output": 2, "attempts_exhausted": 1}
    oldest = queue_page(db, TENANT, QueueFilter()).reviews[0]
    assert counts.oldest_since == oldest.waiting_since
    assert queue_counts(db, TENANT, QueueFilter(reason="invalid_output")).waiting == 2

    def order(by: QueueOrder, where: QueueFilter = ANY) -> list[str]:
        return [r.run_id for r in queue_page(db, TENANT, where, by).reviews]

    assert order(QueueOrder.OLDEST) == [first, second, third]
    assert order(QueueOrder.REASON) == [second, first, third]
    assert order(QueueOrder.PIPELINE) == [first, second, third]
    assert order(QueueOrder.REASON, QueueFilter(reason="invalid_output")) == [first, third]

    # After a decision, the first of the queue as the reviewer sees it, other than the run
    # just decided; none when it was the last.
    assert next_review(db, TENANT, QueueFilter(), QueueOrder.REASON, after=second) == first
    assert next_review(db, TENANT, QueueFilter(), QueueOrder.OLDEST, after=first) == second
    only = QueueFilter(reason="attempts_exhausted")
    assert next_review(db, TENANT, only, QueueOrder.OLDEST, after=second) is None

    with pytest.raises(InvalidRequestError, match="only the oldest-first queue is paged"):
        queue_page(db, TENANT, QueueFilter(), QueueOrder.REASON, cursor="1.x")
