"""A worker process' lease session: its leases end when its PostgreSQL connection does.

Each worker process keeps one connection of its own (outside the pool) holding a session
advisory lock under a key from the ``lease_session_key`` sequence, and every step it claims
or renews carries that key (``pipeline_step_result.lease_session``). When the process dies
(SIGKILL, OOM kill, a pod deleted with grace 0) the kernel closes the connection, the server
ends the session and the lock goes with it: SQL's ``lease_lost`` sees the lease lost at
once, so the next claim of the step, or the reaper's next pass, hands it on without waiting
for the lease's TTL. A key is checked through ``pg_locks`` (the way GoodJob checks its
processes' locks) rather than a backend pid in ``pg_stat_activity`` (Que's way): a key is
never reused while its session lives, whatever pids the server recycles, and ``pg_locks``
shows every role's locks to every role.

The TTL stays for what a closed connection cannot show: a worker alive but cut off (a lost
node, a partition where no FIN arrives) keeps its session open on the server until TCP gives
up, so its steps are handed on after ``lease_ttl_s``, as before; and whatever the session
says, a late result of a worker whose lease was handed on is refused (its owner no longer
matches).

The lock lives on a server connection, so the lease connection must be a session of its
own: behind PgBouncer in transaction mode a server connection is shared by many clients and
outlives each of them. There, set DOCPIPE_LEASE_DATABASE_URL to PostgreSQL itself (or a
PgBouncer pool in session mode), or DOCPIPE_SESSION_LEASES=false for the TTL alone. A
session whose lock does not show as held by its own backend (a transaction pooler in the
way) is given up with an error in the log, and leases fall back to the TTL.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg
from psycopg.rows import dict_row

from docpipe.settings import Settings
from docpipe.state.db import Row, Timeouts, connection_is_usable

__all__ = ["LOCK_CLASS", "LeaseSession"]

log = logging.getLogger(__name__)

# The advisory lock class ("docp") of lease sessions; SQL's lease_lost looks for it.
LOCK_CLASS = 1685021552
# Keys taken in a row by live sessions (the sequence cycles): try the next one.
_KEY_TRIES = 5

_TAKE_KEY = """
SELECT key FROM (SELECT nextval('lease_session_key')::integer AS key) k
WHERE pg_try_advisory_lock(%(lock_class)s::integer, key)
"""
_HOLDS_KEY = """
SELECT EXISTS (SELECT FROM pg_locks
               WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND granted
                 AND classid = %(lock_class)s::oid AND objid = %(key)s::oid AND objsubid = 2)
       AS held
"""


class LeaseSession:
    """The lease connection of one process, opened on first use and reopened (under a new
    key) when it was lost."""

    def __init__(self, url: str, timeouts: Timeouts, *, check_every_s: float) -> None:
        self._url = url
        self._timeouts = timeouts
        self._check_every_s = check_every_s
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Row] | None = None
        self._key: int | None = None
        self._checked_at = 0.0
        self._given_up = False

    @classmethod
    def from_settings(cls, settings: Settings) -> LeaseSession | None:
        """This process' lease session (DOCPIPE_SESSION_LEASES, DOCPIPE_LEASE_DATABASE_URL),
        checked once a heartbeat; None when leases are to rely on their TTL alone."""
        if not settings.session_leases:
            return None
        url = settings.lease_database_url or settings.database_url
        return cls(url, Timeouts.of(settings), check_every_s=settings.heartbeat_interval_s)

    def key(self) -> int | None:
        """The key that a lease claimed or renewed now must carry: that of a session this
        process holds at this moment. None when no session can be had (PostgreSQL down, a
        transaction pooler in the way): such a lease lasts until its TTL, as without
        sessions."""
        with self._lock:
            if self._conn is not None and not self._still_ours(self._conn):
                self._drop()
            if self._given_up:
                return None
            if self._conn is None:
                try:
                    self._open()
                except psycopg.Error as exc:
                    log.warning("no lease session (leases last until their TTL): %s", exc)
                    self._drop()
                    return None
            return self._key

    def close(self) -> None:
        """End the session: every lease still tagged with its key is lost at once."""
        with self._lock:
            self._drop()

    def _open(self) -> None:
        conn: psycopg.Connection[Row] = psycopg.Connection.connect(
            self._url,
            autocommit=True,
            row_factory=dict_row,
            application_name="docpipe-lease-session",
            **self._timeouts.connection_kwargs(self._url),
        )
        self._conn = conn
        for _ in range(_KEY_TRIES):
            row = conn.execute(_TAKE_KEY, {"lock_class": LOCK_CLASS}).fetchone()
            if row is not None:
                self._key = int(row["key"])
                self._checked_at = time.monotonic()
                return
        raise psycopg.OperationalError(f"{_KEY_TRIES} lease keys in a row were taken")

    def _still_ours(self, conn: psycopg.Connection[Row]) -> bool:
        """The connection is up and, checked once per ``check_every_s``, its own backend
        holds the lock. A working connection whose backend does not is a transaction
        pooler's: sessions are given up for good."""
        if not connection_is_usable(conn):
            log.warning("lease session %s lost; its steps' leases are handed on", self._key)
            return False
        if time.monotonic() - self._checked_at < self._check_every_s:
            return True
        try:
            row = conn.execute(_HOLDS_KEY, {"lock_class": LOCK_CLASS, "key": self._key})
            held = row.fetchone()
        except psycopg.Error as exc:
            log.warning(
                "lease session %s lost (%s); its steps' leases are handed on", self._key, exc
            )
            return False
        self._checked_at = time.monotonic()
        if held is None or not held["held"]:
            log.error(
                "the lease connection's backend does not hold its own lock: it goes through a "
                "transaction pooler (PgBouncer in transaction mode?). Leases last until their "
                "TTL from now on; set DOCPIPE_LEASE_DATABASE_URL to a session connection, or "
                "DOCPIPE_SESSION_LEASES=false (docs/concepts/leases.md)"
            )
            self._given_up = True
            return False
        return True

    def _drop(self) -> None:
        conn, self._conn, self._key = self._conn, None, None
        if conn is not None and not conn.closed:
            conn.close()
