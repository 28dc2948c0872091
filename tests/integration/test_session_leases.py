"""Leases tied to the worker's PostgreSQL session (docpipe.state.leases), against real
PostgreSQL: a lease whose session ended is lost at once, a live session keeps it until its
TTL, and whatever the session says a late result of the lost lease's owner is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.settings import Settings
from docpipe.state import runs
from docpipe.state.db import Database, Timeouts
from docpipe.state.leases import LeaseSession
from docpipe.state.recovery import recover_stalled_work
from docpipe.state.webhooks import RetryPolicy
from tests.support.factories import new_run, scalar
from tests.support.processes import wait_until

STEP1 = DOCUMENT_EXTRACT.step_names[1]  # a text document's extract_text is done with its run
# Long enough that no lease of these tests expires on its own while they run.
LEASE_S = 10.0


@pytest.fixture
def lease_session(database_url: str, settings: Settings) -> Iterator[LeaseSession]:
    session = LeaseSession(database_url, Timeouts.of(settings), check_every_s=0.0)
    yield session
    session.close()


@pytest.fixture(autouse=True)
def postgres_up_for_a_lease_period(db: Database) -> None:
    """Sessions count only once PostgreSQL has been up for a lease period (a restart ends
    every session, not every worker): the throwaway server may have just started."""
    uptime = float(scalar(db, "SELECT extract(epoch FROM now() - pg_postmaster_start_time())"))
    time.sleep(max(0.0, LEASE_S - uptime + 0.1))


def claim(db: Database, run_id: str, owner: str, session: int | None) -> runs.Claim | None:
    return runs.claim_step(db, run_id, STEP1, owner=owner, lease_s=LEASE_S, session=session)


def record(db: Database, claimed: runs.Claim, owner: str) -> runs.RecordedStep | None:
    return runs.record_step_result(
        db,
        claimed,
        owner=owner,
        output={"pages": 1},
        model=None,
        prompt_version="v1",
        next_step=DOCUMENT_EXTRACT.next_step(STEP1),
    )


def test_a_live_session_keeps_its_lease_until_the_ttl(
    db: Database, lease_session: LeaseSession
) -> None:
    run = new_run(db)
    assert claim(db, run.run_id, "w1", lease_session.key()) is not None
    assert claim(db, run.run_id, "w2", None) is None, "the owner's session still runs"
    state = runs.step_state(db, run.run_id, STEP1, lease_s=LEASE_S)
    assert state is not None and state.lease_live


def test_the_step_of_an_ended_session_is_claimed_again_at_once_and_its_late_result_refused(
    db: Database, lease_session: LeaseSession
) -> None:
    run = new_run(db)
    first = claim(db, run.run_id, "w1", lease_session.key())
    assert first is not None
    lease_session.close()  # what a killed process' closed connection does

    def lease_lost() -> bool:
        state = runs.step_state(db, run.run_id, STEP1, lease_s=LEASE_S)
        return state is not None and not state.lease_live

    # The backend ends (and drops its lock) a moment after the client closed its connection.
    wait_until(lease_lost, timeout_s=2, every_s=0.01)
    second = claim(db, run.run_id, "w2", None)
    assert second is not None and second.attempt == 2, "taken over long before the TTL"
    assert record(db, first, "w1") is None, "the first owner's late result is refused"
    assert record(db, second, "w2") is not None
    assert scalar(db, "SELECT status FROM pipeline_step_result WHERE step = %s", STEP1) == "done"


def test_the_reaper_hands_back_the_step_of_an_ended_session_at_once(
    db: Database, lease_session: LeaseSession, broker: redis.Redis, settings: Settings
) -> None:
    run = new_run(db)
    with db.session() as s:  # the message was consumed: only the reaper can send a new one
        s.conn.execute(b"UPDATE outbox SET published_at = now()")
    assert claim(db, run.run_id, "w1", lease_session.key()) is not None

    def reap() -> int:
        return recover_stalled_work(
            db,
            broker,
            grace_s=60,
            lease_s=LEASE_S,
            webhook_retry=RetryPolicy.from_settings(settings),
        ).expired_leases

    assert reap() == 0, "a live session's lease is left alone"
    lease_session.close()
    assert reap() == 1
    assert scalar(db, "SELECT error FROM pipeline_step_result WHERE step = %s", STEP1) == (
        "lease lost: the worker's session ended"
    )
    assert scalar(db, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 1


def test_a_lost_lease_connection_is_replaced_under_a_new_key_that_renewals_carry(
    db: Database, lease_session: LeaseSession
) -> None:
    run = new_run(db)
    old_key = lease_session.key()
    assert old_key is not None
    assert claim(db, run.run_id, "w1", old_key) is not None
    with db.session() as s:  # the server ends the lease connection (an admin, a restart)
        s.conn.execute(
            b"SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            b" WHERE application_name = 'docpipe-lease-session'"
        )

    def replaced() -> str | None:
        key = lease_session.key()
        return key if key != old_key else None

    # The server ends the backend a moment after it is asked to; the session then reconnects.
    new_key = wait_until(replaced, timeout_s=10)
    # The worker renews before anyone took the step over: it keeps it, under the new key.
    held = [(run.run_id, STEP1)]
    assert runs.renew_leases(db, held, owner="w1", lease_s=LEASE_S, session=new_key) == set(held)
    assert claim(db, run.run_id, "w2", None) is None
    assert (
        scalar(db, "SELECT lease_session FROM pipeline_step_result WHERE step = %s", STEP1)
        == new_key
    )


def test_without_a_session_a_lease_lasts_its_ttl(db: Database) -> None:
    run = new_run(db)
    assert runs.claim_step(db, run.run_id, STEP1, owner="w1", lease_s=0.3) is not None
    assert claim(db, run.run_id, "w2", None) is None
    # Refused until the 0.3 s lease runs out, then taken: polled, not slept.
    again = wait_until(lambda: claim(db, run.run_id, "w2", None), timeout_s=10)
    assert again.attempt == 2
