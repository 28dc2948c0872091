"""Connections to docpipe's PostgreSQL and the named queries of ``sql/queries/``.

Only the modules of docpipe.state know query names; the rest of docpipe calls functions
such as ``runs.claim_step``. Rows come back as dicts (``one``/``all``) or, mapped once by
psycopg's row factory, as the dataclass the caller names (``one_as``/``all_as``): a query's
column names are then that dataclass' fields.

Every connection is bounded (:class:`Timeouts`): connecting, data the server does not
acknowledge (a server that drops packets answers no reset, so only the kernel's TCP user
timeout and keepalives notice), each statement and each lock wait on the server, and the
wait for a free pooled connection.
"""

from __future__ import annotations

import math
import os
import re
import select
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import class_row, dict_row
from psycopg.types.json import set_json_dumps
from psycopg_pool import ConnectionPool

from docpipe import json_codec
from docpipe.settings import Settings
from docpipe.state.query_paths import CUSTOM_PLAN

# JSON and JSONB parameters encoded by docpipe.json_codec (orjson).
set_json_dumps(json_codec.dumps)

__all__ = [
    "Database",
    "Row",
    "Session",
    "Timeouts",
    "connection_is_usable",
    "load_queries",
    "read_queries",
]

Row = dict[str, Any]
T = TypeVar("T")

_QUERY_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def load_queries() -> Mapping[str, str]:
    """Every named query of docpipe.state (``sql/queries/``), by name."""
    return read_queries(files("docpipe.state").joinpath("sql/queries"))


def read_queries(folder: Traversable) -> dict[str, str]:
    """Every ``-- name: x`` block of the ``.sql`` files in ``folder``, by name; RuntimeError
    naming both files when a name is defined twice."""
    queries: dict[str, str] = {}
    defined_in: dict[str, str] = {}
    sources = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=str)
    for source in sources:
        parts = _QUERY_HEADER.split(source.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(
                    f"query {name!r} is defined twice: in {defined_in[name]} and {source.name}"
                )
            queries[name], defined_in[name] = body.strip(), source.name
    return queries


@dataclass(frozen=True)
class Timeouts:
    """How long a connection waits for PostgreSQL (the DOCPIPE_DATABASE_*_TIMEOUT_S settings)."""

    connect_s: int
    socket_s: float
    statement_s: float
    lock_s: float
    pool_s: float

    @classmethod
    def of(cls, settings: Settings) -> Timeouts:
        return cls(
            connect_s=settings.database_connect_timeout_s,
            socket_s=settings.database_socket_timeout_s,
            statement_s=settings.database_statement_timeout_s,
            lock_s=settings.database_lock_timeout_s,
            pool_s=settings.database_pool_timeout_s,
        )

    def connection_kwargs(self, url: str) -> dict[str, Any]:
        """libpq parameters that bound a connection to ``url``; options the URL sets itself
        (``?options=-c statement_timeout=...``) come last, so they win."""
        idle, interval = max(1, math.ceil(self.socket_s / 2)), max(1, math.ceil(self.socket_s / 6))
        # The server bounds its end the same way: the session of a client cut off (a lost
        # node, a partition) ends within about socket_s, instead of after the kernel's
        # retransmissions (15 minutes) or keepalives (two hours), and with it the session's
        # advisory locks (a periodic job's, a lease session's), which would otherwise keep
        # every other beat's job from running and the client's leases alive.
        # No JIT: docpipe's statements read a few hundred buffers at most, but their plans'
        # estimated costs grow with the tables and pass jit_above_cost at about a million
        # runs, where compiling took 90-160 ms of a statement doing 2 ms of work (admission,
        # bench.scale).
        options = (
            f"-c statement_timeout={_ms(self.statement_s)} -c lock_timeout={_ms(self.lock_s)}"
            f" -c tcp_user_timeout={_ms(self.socket_s)} -c tcp_keepalives_idle={idle}"
            f" -c tcp_keepalives_interval={interval} -c tcp_keepalives_count={_KEEPALIVES}"
            " -c jit=off"
        )
        if own := conninfo_to_dict(url).get("options"):
            options = f"{options} {own}"
        return {
            "connect_timeout": self.connect_s,
            "tcp_user_timeout": _ms(self.socket_s),
            # A silent peer (no data pending, nothing acknowledged) is noticed by keepalives
            # within about the same time.
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": interval,
            "keepalives_count": _KEEPALIVES,
            "options": options,
        }


_KEEPALIVES = 3


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


# Settings' defaults, without reading the environment: for a Database built without timeouts.
_DEFAULT_TIMEOUTS = Timeouts.of(Settings.model_construct())


def _check_if_disturbed(conn: psycopg.Connection[Row]) -> None:
    """Raise if a pooled connection is dead, probing the server only when it could be.

    The socket of an idle connection has nothing to read unless the server wrote to it,
    which it does when it closes the connection (restart, crash, terminated backend): a
    readable socket is probed with a query (and the connection replaced if that fails); a
    quiet one is used at once, without the round trip that a probe on every checkout costs.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)


def connection_is_usable(conn: psycopg.Connection[Row]) -> bool:
    """False once the connection is closed or its server closed it (probed as above)."""
    try:
        _check_if_disturbed(conn)
    except psycopg.Error:
        return False
    return True


def _prepare(query: str) -> bool | None:
    """psycopg's ``prepare``: never for the queries planned with their values every time
    (docpipe.state.query_paths.CUSTOM_PLAN says why), else the connection's own rule."""
    return False if query in CUSTOM_PLAN else None


class Session:
    """One connection, used either in autocommit or inside a transaction."""

    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self.conn = conn

    def one(self, query: str, **params: Any) -> Row | None:
        cur = self.conn.execute(load_queries()[query], params, prepare=_prepare(query))
        return cur.fetchone()

    def all(self, query: str, **params: Any) -> list[Row]:
        cur = self.conn.execute(load_queries()[query], params, prepare=_prepare(query))
        return cur.fetchall()

    def execute(self, query: str, **params: Any) -> int:
        """Run ``query``; returns the number of rows it touched."""
        return self.conn.execute(load_queries()[query], params, prepare=_prepare(query)).rowcount

    def one_as(self, cls: type[T], query: str, **params: Any) -> T | None:
        with self.conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(load_queries()[query], params, prepare=_prepare(query)).fetchone()

    def insert_or_existing(self, query: str, **params: Any) -> Row:
        """Run an ``INSERT ... ON CONFLICT DO NOTHING`` query that otherwise returns the
        existing row. When a concurrent transaction inserts the same key, our INSERT waits
        for it and then does nothing, but the statement's snapshot predates that row: the
        second try, with a fresh snapshot, sees it."""
        for _ in range(2):
            if (row := self.one(query, **params)) is not None:
                return row
        raise RuntimeError(f"{query}: neither inserted nor found a row")

    def all_as(self, cls: type[T], query: str, **params: Any) -> list[T]:
        with self.conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(load_queries()[query], params, prepare=_prepare(query)).fetchall()

    def search_as(self, cls: type[T], query: str, **params: Any) -> list[T]:
        """``all_as`` for a query with optional filters (``%(x)s IS NULL OR ...``), planned
        with its parameters every time instead of from a prepared statement's generic plan:
        the filters left unset fold away, and the index the set ones call for is used (a
        generic plan, made once for every combination, scans in one order for all)."""
        with self.conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(load_queries()[query], params, prepare=False).fetchall()

    def chunks_as(self, cls: type[T], query: str, *, rows: int, **params: Any) -> Iterator[list[T]]:
        """``query``'s rows, ``rows`` at a time, from a server-side cursor: the server keeps
        the result and sends each chunk as it is asked for, so no more than one chunk is
        ever in this process. Only inside a transaction (the cursor lives in it)."""
        with self.conn.cursor(name=f"docpipe_{query}", row_factory=class_row(cls)) as cur:
            cur.execute(load_queries()[query], params)
            while chunk := cur.fetchmany(rows):
                yield chunk


class Database:
    """A small pool of autocommit connections to one database, every wait bounded."""

    def __init__(
        self,
        url: str,
        *,
        max_size: int = 4,
        timeouts: Timeouts | None = None,
        prepared_statements: bool = True,
    ) -> None:
        self.url = url
        self.timeouts = timeouts or _DEFAULT_TIMEOUTS
        self._pid = os.getpid()
        self._pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                # Named queries are few and fixed: each is prepared at its first use on a
                # connection (psycopg's default waits for the fifth), or never.
                "prepare_threshold": 0 if prepared_statements else None,
                **self.timeouts.connection_kwargs(url),
            },
            connection_class=psycopg.Connection[Row],
            # A broken connection (server restarted) is replaced instead of failing a task.
            check=_check_if_disturbed,
            # No free connection within this long: PoolTimeout (an OperationalError).
            timeout=self.timeouts.pool_s,
            name="docpipe",
            open=True,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        """The process' database: DOCPIPE_DATABASE_URL, its pool size and timeouts."""
        return cls(
            settings.database_url,
            max_size=settings.database_pool_size,
            timeouts=Timeouts.of(settings),
            prepared_statements=settings.database_prepared_statements,
        )

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A pooled connection in autocommit mode: each statement commits on its own."""
        with self._pool.connection() as conn:
            yield Session(conn)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A pooled connection inside one transaction, committed when the block ends."""
        with self._pool.connection() as conn, conn.transaction():
            yield Session(conn)

    @contextmanager
    def detached_transaction(self, *, application_name: str, idle_s: float) -> Iterator[Session]:
        """A read-only transaction on a connection of its own, outside the pool: for a long
        read (a server-side cursor streamed to a client) that must not hold one of the pool's
        few connections. The server ends it once it waits ``idle_s`` between two statements
        (a client that stopped reading), so it never holds back vacuum for long."""
        with (
            psycopg.connect(
                self.url,
                row_factory=dict_row,
                application_name=application_name,
                **self.timeouts.connection_kwargs(self.url),
            ) as conn,
            conn.transaction(),
        ):
            conn.execute("SET TRANSACTION READ ONLY")
            conn.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                (f"{_ms(idle_s)}ms",),
            )
            yield Session(conn)

    @contextmanager
    def pinned(self) -> Iterator[Database]:
        """This database on one pooled connection, held for the block: for work that holds a
        session-level lock while it does more (a periodic job). Taking a second connection
        while holding one could wait forever once every connection of the pool is held so
        (a threads worker runs many tasks on one small pool)."""
        with self._pool.connection() as conn:
            yield _OnOneConnection(self, conn)

    def one(self, query: str, **params: Any) -> Row | None:
        with self.session() as s:
            return s.one(query, **params)

    def all(self, query: str, **params: Any) -> list[Row]:
        with self.session() as s:
            return s.all(query, **params)

    def execute(self, query: str, **params: Any) -> int:
        with self.session() as s:
            return s.execute(query, **params)

    def one_as(self, cls: type[T], query: str, **params: Any) -> T | None:
        with self.session() as s:
            return s.one_as(cls, query, **params)

    def all_as(self, cls: type[T], query: str, **params: Any) -> list[T]:
        with self.session() as s:
            return s.all_as(cls, query, **params)

    def search_as(self, cls: type[T], query: str, **params: Any) -> list[T]:
        with self.session() as s:
            return s.search_as(cls, query, **params)

    def close(self) -> None:
        # After a fork the pool's threads are not ours: only the creating process closes it.
        if os.getpid() == self._pid:
            self._pool.close()


class _OnOneConnection(Database):
    """A Database whose sessions and transactions all use one connection (Database.pinned)."""

    def __init__(self, parent: Database, conn: psycopg.Connection[Row]) -> None:
        # No pool of its own: the parent's connection, for as long as the parent lends it.
        self.url = parent.url
        self.timeouts = parent.timeouts
        self._pid = os.getpid()
        self._conn = conn

    @contextmanager
    def session(self) -> Iterator[Session]:
        yield Session(self._conn)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with self._conn.transaction():
            yield Session(self._conn)

    @contextmanager
    def pinned(self) -> Iterator[Database]:
        yield self

    def close(self) -> None:
        pass  # the connection goes back to the parent's pool when pinned() ends
