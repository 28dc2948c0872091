"""Plans and timings of docpipe's named queries on a filled database, as prepared statements
run them: the custom plan (planned with the values) and the generic plan (planned once,
for any values: what a prepared statement settles on after its fifth execution).

``QueryLab(conn)`` prepares each named query under its own name, with ``%(x)s`` turned into
``$n``; ``plan()`` explains it with values from :class:`SampleValues` (taken from the
filled database: a run in flight, a large batch, the large tenant), ``time()`` runs it
inside a transaction that is rolled back, so a statement that writes (an admission, a
retention batch) leaves the database as it was. Used by the scan guard
(tests/integration/test_query_plans.py) and by bench.scale.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

__all__ = ["GUARDED_TABLES", "QueryLab", "SampleValues", "Scan", "scans", "seq_scans"]

# Tables whose size is the history: a sequential scan of one is a query that grows with it.
GUARDED_TABLES = ("pipeline_run", "pipeline_step_result", "llm_call_log")
MODES = ("custom", "generic")

_PARAM = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class Scan:
    node: str  # "Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan", ...
    relation: str | None
    index: str | None

    def __str__(self) -> str:
        return f"{self.node} {self.index or self.relation}"


def scans(plan: Mapping[str, Any]) -> Iterator[Scan]:
    """Every node of an EXPLAIN (FORMAT JSON) plan that reads a table or an index."""
    node = plan.get("Node Type", "")
    if "Scan" in node and ("Relation Name" in plan or "Index Name" in plan):
        yield Scan(node, plan.get("Relation Name"), plan.get("Index Name"))
    for child in plan.get("Plans", ()):
        yield from scans(child)


def written(plan: Mapping[str, Any]) -> set[str]:
    """The tables an EXPLAIN ANALYZE plan changed rows of (its INSERT, UPDATE and DELETE
    nodes, in CTEs too, that were given a row)."""
    found: set[str] = set()
    if plan.get("Node Type") == "ModifyTable" and any(
        child.get("Actual Rows", 0) for child in plan.get("Plans", ())
    ):
        found.add(str(plan["Relation Name"]))
    for child in plan.get("Plans", ()):
        found |= written(child)
    return found


def _is_guarded(relation: str | None) -> bool:
    # llm_call_log's partitions are named after it.
    return relation is not None and any(
        relation == t or relation.startswith(f"{t}_") for t in GUARDED_TABLES
    )


def seq_scans(plan: Mapping[str, Any]) -> list[Scan]:
    """The sequential scans of the history's tables in a plan."""
    return [s for s in scans(plan) if s.node == "Seq Scan" and _is_guarded(s.relation)]


def plan_note(plan: Mapping[str, Any]) -> str:
    """The scans of a plan, each once, in plan order: what a report row says of its plan."""
    seen: list[str] = []
    for scan in scans(plan):
        if str(scan) not in seen:
            seen.append(str(scan))
    return "; ".join(seen) or "no table read"


def positional(sql: str) -> tuple[str, list[str]]:
    """``sql`` with each ``%(name)s`` as ``$n`` (one number per name) and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _PARAM.sub(number, sql).replace("%%", "%"), names


class SampleValues:
    """A value for each parameter, by name and type, taken from the filled database: the
    ids a caller would pass on a busy day (a run in flight, the large tenant, its largest
    batch), a first page for cursors, the settings' defaults for durations."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(
            b"SELECT id, tenant_id, document_id, batch_id FROM pipeline_run"
            b" WHERE status = 'running' AND lane = 'batch' ORDER BY id LIMIT 1"
        ).fetchone()
        if row is None:
            raise ValueError("the database holds no run in flight: fill it first (bench.busy)")
        run_id, tenant, document, running_batch = row
        batch = conn.execute(
            b"SELECT id FROM batch WHERE tenant_id = %s AND status <> 'running'"
            b" ORDER BY runs_total DESC, id LIMIT 1",
            (tenant,),
        ).fetchone()
        runs = [
            r[0]
            for r in conn.execute(
                b"SELECT id FROM pipeline_run WHERE batch_id = %s ORDER BY id LIMIT 20",
                (batch[0] if batch else running_batch,),
            )
        ]
        now = datetime.now(UTC)
        self.by_name: dict[str, Any] = {
            "run_id": run_id,
            "run_ids": runs,
            "tenant_id": tenant,
            "document_id": document,
            "document_ids": [document],
            "batch_id": batch[0] if batch else running_batch,
            "after": uuid.UUID(int=0),
            "after_id": None,
            "after_since": None,
            "step": "extract_fields",
            "steps": ["extract_text", "extract_sections", "extract_fields", "summarize"],
            "status": "done",
            "statuses": [
                "queued",
                "running",
                "done",
                "failed",
                "needs_review",
                "cancelled",
                "expired",
                "budget_exceeded",
            ],
            "output_statuses": ["done"],
            # the home page's counts: since a day ago for each of the statuses above
            "sinces": [now - timedelta(days=1)] * 8,
            "cap": 1000,
            "owner": "celery@bench:1",
            "limit": 50,
            "window": 64,
            "days": 90,
            "document_days": 90,
            "lease_s": 60.0,
            "memory_s": 3600.0,
            "grace_s": 5.0,
            "lost_after_s": 30.0,
            "queues": Jsonb({"interactive": "llm_interactive", "batch": "llm_batch"}),
            "cutoffs": Jsonb({"llm_batch": now.isoformat()}),
            "calls": Jsonb(
                [
                    {
                        "call_key": f"section:{i}",
                        "model": "gpt-4o-mini",
                        "provider": "default",
                        "route_reason": "cheapest",
                        "output_mode": "json_schema",
                        "max_tokens": 1024,
                        "temperature": 0,
                        "seed": None,
                        "estimated_cost_usd": 0.0002,
                    }
                    for i in range(4)
                ]
            ),
            "finished": Jsonb([]),
        }
        # Names that mean different things in different queries, told apart by type.
        self.by_name_and_type: dict[tuple[str, str], Any] = {
            ("id", "text"): document,
            ("id", "uuid"): uuid.uuid4(),  # a new run or batch
            ("ids", "text[]"): [document],
        }
        self.by_type: dict[str, Any] = {
            "uuid": run_id,
            "uuid[]": runs,
            "text": "bench",
            "text[]": ["bench"],
            "integer": 1,
            "bigint": 1,
            "integer[]": [0],
            "bigint[]": [1, 2, 3],
            "double precision": 1.0,
            "real": 0.5,
            "numeric": None,
            "boolean": False,
            "jsonb": None,
            "bytea": b"",
            "timestamp with time zone": now,
        }

    def value(self, name: str, type_: str) -> Any:
        if (name, type_) in self.by_name_and_type:
            return self.by_name_and_type[name, type_]
        if name in self.by_name:
            return self.by_name[name]
        if type_ not in self.by_type:
            raise KeyError(f"no sample value for parameter {name} of type {type_}")
        return self.by_type[type_]


class QueryLab:
    """Named queries prepared on one connection (in autocommit), explained and timed in both
    plan modes."""

    def __init__(self, conn: psycopg.Connection[Any], queries: Mapping[str, str]) -> None:
        self.conn = conn
        self.queries = queries
        self.values = SampleValues(conn)
        self._prepared: dict[str, tuple[list[str], list[str]]] = {}
        self._client = psycopg.ClientCursor(conn)

    def _prepare(self, name: str) -> tuple[list[str], list[str]]:
        if name not in self._prepared:
            text, names = positional(self.queries[name])
            self.conn.execute(f"PREPARE lab_{name} AS {text}".encode())
            row = self.conn.execute(
                b"SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = %s",
                (f"lab_{name}",),
            ).fetchone()
            assert row is not None
            self._prepared[name] = (names, list(row[0]))
        return self._prepared[name]

    def _execute_sql(self, name: str, values: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
        names, types = self._prepare(name)
        given = values or {}
        args = [
            given[n] if n in given else self.values.value(n, t)
            for n, t in zip(names, types, strict=True)
        ]
        placeholders = ", ".join(["%s"] * len(args))
        return f"EXECUTE lab_{name}({placeholders})" if args else f"EXECUTE lab_{name}", args

    def _mode(self, mode: str) -> None:
        setting = {"custom": "force_custom_plan", "generic": "force_generic_plan"}[mode]
        self.conn.execute(f"SET plan_cache_mode = {setting}".encode())

    def plan(self, name: str, mode: str, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The plan (EXPLAIN, not run) in ``mode``: "custom" or "generic"."""
        self._mode(mode)
        sql, args = self._execute_sql(name, values)
        self._client.execute(f"EXPLAIN (FORMAT JSON) {sql}".encode(), args)
        row = self._client.fetchone()
        assert row is not None
        document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        return dict(document[0]["Plan"])

    def time(
        self,
        name: str,
        mode: str,
        *,
        repeat: int = 5,
        values: Mapping[str, Any] | None = None,
    ) -> tuple[list[float], dict[str, Any]]:
        """Milliseconds of ``repeat`` executions (after one to warm the cache) and the plan
        of one run with its buffers (EXPLAIN ANALYZE), each in a transaction rolled back."""
        self._mode(mode)
        sql, args = self._execute_sql(name, values)
        timings: list[float] = []
        for i in range(repeat + 1):
            with self._rolled_back():
                started = time.perf_counter()
                self._client.execute(sql.encode(), args)
                elapsed = 1000 * (time.perf_counter() - started)
            if i:
                timings.append(elapsed)
        with self._rolled_back():
            self._client.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}".encode(), args)
            row = self._client.fetchone()
        assert row is not None
        document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        return timings, dict(document[0]["Plan"])

    def history_scans(self, plan: Mapping[str, Any]) -> list[Scan]:
        """The sequential scans of the history's tables in ``plan``, but of those that are
        empty (the call log's partitions of the weeks ahead: a scan of one reads nothing, and
        the planner plans afresh once it has rows and statistics)."""
        empty = {
            r[0]
            for r in self.conn.execute(
                b"SELECT relname FROM pg_class WHERE relkind = 'r'"
                b" AND relname LIKE ANY (%s) AND pg_relation_size(oid) = 0",
                ([f"{t}%" for t in GUARDED_TABLES],),
            )
        }
        return [s for s in seq_scans(plan) if s.relation not in empty]

    def _rolled_back(self) -> _RolledBack:
        return _RolledBack(self.conn)


class _RolledBack:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute(b"BEGIN")

    def __exit__(self, *exc: object) -> None:
        self.conn.execute(b"ROLLBACK")


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
