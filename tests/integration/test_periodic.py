"""Periodic jobs run at most once per interval, never two at once, in two round trips."""

from __future__ import annotations

import pytest

from docpipe.state.db import Database
from docpipe.state.periodic import run_once_per_interval
from tests.support.factories import scalar


def test_a_job_runs_once_per_interval_and_records_its_result(db: Database) -> None:
    ran: list[int] = []

    def job(_: Database) -> dict[str, int]:
        ran.append(1)
        return {"n": len(ran)}

    assert run_once_per_interval(db, "tick", 60, job) == {"n": 1}
    assert run_once_per_interval(db, "tick", 60, job) is None, "a second beat's tick"
    assert ran == [1]
    assert scalar(db, "SELECT runs FROM periodic_job WHERE name = 'tick'") == 1
    assert scalar(db, "SELECT last_result FROM periodic_job WHERE name = 'tick'") == {"n": 1}


def test_a_job_still_running_is_not_started_again_and_a_failure_frees_it(db: Database) -> None:
    def nested(_: Database) -> dict[str, int]:
        # The same job from another session while this one holds its lock: refused.
        assert run_once_per_interval(db, "long", 0, lambda _: {"again": 1}) is None
        raise RuntimeError("the job failed")

    with pytest.raises(RuntimeError):
        run_once_per_interval(db, "long", 0, nested)
    # The failed run released its lock: the next tick runs.
    assert run_once_per_interval(db, "long", 0, lambda _: {"ok": 1}) == {"ok": 1}


def test_a_job_works_on_the_connection_that_holds_its_lock(database_url: str) -> None:
    """A pool of one connection, held by the job's lock: the job's own statements and
    transactions use that connection instead of waiting for another (which, with every
    connection held so by a job, would wait forever)."""
    one = Database(database_url, max_size=1)
    try:

        def job(pinned: Database) -> dict[str, int]:
            with pinned.transaction() as tx:
                tx.conn.execute(b"SELECT 1")
            return {"runs": int(scalar(pinned, "SELECT runs FROM periodic_job WHERE name = 'one'"))}

        assert run_once_per_interval(one, "one", 60, job) == {"runs": 1}
    finally:
        one.close()
