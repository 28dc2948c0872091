"""Emptying the test database between tests, at the cost of what a test left behind.

TRUNCATE of every table costs a new file for each table and index, about 0.1-0.2 s for the
whole schema, whatever they hold; most tests write a few rows to a few tables. So the tables
that hold a row are found first (one statement), and those are emptied with DELETE, the
referencing ones before those they reference. A table filled past ``BULK_ROWS`` (a fill of a
busy database) is TRUNCATEd, where DELETE would be slower and leave dead rows behind. The
sequences the tables own start again either way, as TRUNCATE ... RESTART IDENTITY did.
"""

from __future__ import annotations

from dataclasses import dataclass
from graphlib import TopologicalSorter
from typing import Any

import psycopg
from psycopg import sql

BULK_ROWS = 1000

_TABLES = b"""
SELECT c.oid, c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
  AND NOT c.relispartition AND c.relname <> 'docpipe_migration'
"""
# (referencing, referenced) pairs among those tables; a partition's copies of its parent's
# constraints are left out (conparentid), the parent's are enough.
_REFERENCES = b"""
SELECT conrelid, confrelid FROM pg_constraint
WHERE contype = 'f' AND conparentid = 0 AND conrelid = ANY(%(tables)s::oid[])
"""
# Sequences the tables own (serial and identity columns): what RESTART IDENTITY restarts.
_OWNED_SEQUENCES = b"""
SELECT d.objid FROM pg_depend d JOIN pg_sequence s ON s.seqrelid = d.objid
WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
  AND d.deptype IN ('a', 'i') AND d.refobjid = ANY(%(tables)s::oid[])
"""


@dataclass(frozen=True)
class Emptying:
    """The statements that empty a migrated database, read once from its catalog."""

    tables: tuple[str, ...]  # each referencing table before the tables it references
    rows_held: sql.Composed
    restart_sequences: sql.Composed

    @classmethod
    def read(cls, conn: psycopg.Connection[Any]) -> Emptying:
        name_of = dict(conn.execute(_TABLES).fetchall())
        assert name_of, "the migrations made no table"
        oids = list(name_of)
        order = TopologicalSorter[str]({name: set() for name in name_of.values()})
        for referencing, referenced in conn.execute(_REFERENCES, {"tables": oids}):
            if referencing != referenced:  # referenced after referencing
                order.add(name_of[referenced], name_of[referencing])
        tables = tuple(order.static_order())
        # Up to BULK_ROWS + 1 rows of each table counted: enough to tell "few" from "a fill".
        rows_held = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {}, (SELECT count(*) FROM (SELECT FROM {} LIMIT {}) AS r)").format(
                sql.Literal(name), sql.Identifier(name), sql.Literal(BULK_ROWS + 1)
            )
            for name in tables
        )
        sequences = [oid for (oid,) in conn.execute(_OWNED_SEQUENCES, {"tables": oids})]
        restart = sql.SQL(
            "SELECT setval(seqrelid, seqstart, false) FROM pg_sequence"
            " WHERE seqrelid = ANY({}::oid[])"
        ).format(sql.Literal(sequences))
        return cls(tables, rows_held, restart)

    def empty(self, conn: psycopg.Connection[Any]) -> None:
        """Empty every table of ``conn``'s database (an autocommit connection)."""
        held = {name: count for name, count in conn.execute(self.rows_held) if count}
        with conn.transaction():
            if any(count > BULK_ROWS for count in held.values()):
                names = sql.SQL(", ").join(sql.Identifier(name) for name in self.tables)
                conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(names))
            else:
                for name in (name for name in self.tables if name in held):
                    conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(name)))
            conn.execute(self.restart_sequences)
