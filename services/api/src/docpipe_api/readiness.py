"""Readiness' own PostgreSQL connections, kept open between probes.

Opening a connection costs PostgreSQL a new backend process: on a busy 2-core machine 26 ms
at the median and 77 ms at the 99th percentile, where a ``SELECT 1`` on an open connection
took 1.3 ms. A probe that opened one each time spent its p99 there. These connections are
the probes' alone (never the app's pool, which tenants' requests can exhaust), so /readyz
waits for nothing but PostgreSQL.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from docpipe.state.db import Timeouts

__all__ = ["APPLICATION_NAME", "PROBE_TIMEOUTS", "PostgresProbe"]

# What pg_stat_activity shows for them.
APPLICATION_NAME = "docpipe-readiness"
_CHECK_TIMEOUT_S = 2
# Connections of the probes' own (bounded even when the pool is exhausted), every wait
# shorter than the kubelet's probe timeout.
PROBE_TIMEOUTS = Timeouts(
    connect_s=_CHECK_TIMEOUT_S,
    socket_s=_CHECK_TIMEOUT_S,
    statement_s=_CHECK_TIMEOUT_S,
    lock_s=_CHECK_TIMEOUT_S,
    pool_s=_CHECK_TIMEOUT_S,
)


class PostgresProbe:
    """``SELECT 1`` on a kept connection (at most ``kept`` of them, one per probe running
    at once); one that broke since its last use (PostgreSQL restarted, the server closed
    it) is dropped and a fresh one asked instead, so only PostgreSQL's answer now decides."""

    def __init__(self, url: str, timeouts: Timeouts, *, kept: int) -> None:
        self._url = url
        self._kwargs = timeouts.connection_kwargs(url)
        self._kept = kept
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._closed = False

    def select_one(self) -> None:
        """Returns once PostgreSQL answered; psycopg.Error or OSError when it did not."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            try:
                conn.execute("SELECT 1")
            except psycopg.Error:
                conn.close()
            else:
                self._keep(conn)
                return
        conn = psycopg.connect(
            self._url, autocommit=True, application_name=APPLICATION_NAME, **self._kwargs
        )
        try:
            conn.execute("SELECT 1")
        except BaseException:
            conn.close()
            raise
        self._keep(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            conn.close()

    def _keep(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._kept:
                self._idle.append(conn)
                return
        conn.close()
