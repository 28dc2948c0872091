"""The lists stay fast however long a history grows: on a busy database (bench.busy's
shape, analysed), every page of GET /runs and GET /batches, whatever filters are set, is
read from an index of migration 0060 (or the batch's, or the review queue's, or the
document prefix's of migration 0076), never by scanning the runs; a page of runs by
document prefix reads the prefix's runs only when the newest runs do not hold a page of
them, and lists what a plain sort of every match would. bench/lists.py measures the same
queries at 1,000,000 runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from bench.busy import Filled, Shape, fill
from docpipe.state import lists
from docpipe.state.cursors import write_cursor
from docpipe.state.db import Database, load_queries
from docpipe.state.migrate import apply_migrations
from tests.support.servers import create_database

# Slow: every test reads a 20,000-run fill; make test-fast leaves it out.
pytestmark = pytest.mark.slow

# Many small batches, so that batches too are many pages; no call log (lists never read it).
SHAPE = Shape(
    runs=20_000,
    batch_sizes=(5, 60),
    call_log_days=0,
    waiting=400,
    in_flight=8,
    interactive_in_flight=8,
    review_backlog=40,
)


@pytest.fixture(scope="module")
def busy(postgres_admin_url: str) -> Iterator[tuple[Filled, psycopg.Connection[Any]]]:
    url = create_database(postgres_admin_url, "docpipe_lists")
    apply_migrations(url)
    filled = fill(url, SHAPE)
    with psycopg.connect(url, autocommit=True) as conn:
        # A second pipeline, run for one document in a hundred.
        conn.execute(b"UPDATE pipeline_run SET pipeline = 'nda_review:v1' WHERE random() < 0.01")
        conn.execute(b"VACUUM ANALYZE")  # as autovacuum keeps a live database
        yield filled, conn


def plan_of(conn: psycopg.Connection[Any], query: str, params: Mapping[str, Any]) -> list[str]:
    """Every scan of the plan ``query`` gets with ``params`` (planned with them, as
    Session.search_as runs it), as "Node Type on relation [using index]"."""
    sql = f"EXPLAIN (FORMAT JSON) {load_queries()[query]}"
    row = conn.execute(sql.encode(), params, prepare=False).fetchone()
    assert row is not None
    scans: list[str] = []

    def walk(node: Mapping[str, Any]) -> None:
        if "Relation Name" in node or "Index Name" in node:
            using = f" using {node['Index Name']}" if "Index Name" in node else ""
            scans.append(f"{node['Node Type']} on {node.get('Relation Name', '')}{using}")
        for child in node.get("Plans", []):
            walk(child)

    walk(row[0][0]["Plan"])
    return scans


def run_filters(filled: Filled) -> dict[str, tuple[lists.RunFilters, str]]:
    """Each kind of filter, and the index its page is read from (or any of several)."""
    now = datetime.now(UTC)
    return {
        "none": (lists.RunFilters(), "pipeline_run_tenant_created_idx"),
        "status": (lists.RunFilters(status="failed"), "pipeline_run_tenant_status_idx"),
        "rare pipeline": (
            lists.RunFilters(pipeline="nda_review:v1"),
            "pipeline_run_tenant_pipeline_idx",
        ),
        # Nearly every run's: reading the tenant's runs in order is as good.
        "common pipeline": (
            lists.RunFilters(pipeline="document_extract:v1"),
            "pipeline_run_tenant_created_idx pipeline_run_tenant_pipeline_idx",
        ),
        # A batch's own runs (a small one's all at once, a large one's in order), never the
        # tenant's history.
        "batch": (
            lists.RunFilters(batch_id=filled.big_batch_id),
            "pipeline_run_batch_created_idx pipeline_run_batch_status_idx",
        ),
        "document": (lists.RunFilters(document="doc-1234"), "pipeline_run_document_created_idx"),
        "time range": (
            lists.RunFilters(created_from=now - timedelta(days=1), created_to=now),
            "pipeline_run_tenant_created_idx",
        ),
        "status and time": (
            lists.RunFilters(status="done", created_from=now - timedelta(days=1)),
            "pipeline_run_tenant_status_idx",
        ),
    }


KINDS = [
    "none",
    "status",
    "rare pipeline",
    "common pipeline",
    "batch",
    "document",
    "time range",
    "status and time",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("paged", [False, True], ids=["first page", "next page"])
def test_a_page_of_runs_is_read_from_an_index_whatever_the_filter(
    busy: tuple[Filled, psycopg.Connection[Any]], kind: str, paged: bool
) -> None:
    filled, conn = busy
    filters, index = run_filters(filled)[kind]
    cursor = None
    if paged:  # a cursor from the middle of the history
        row = conn.execute(
            b"SELECT created_at, id::text FROM pipeline_run WHERE tenant_id = %s"
            b" ORDER BY created_at DESC, id DESC OFFSET 500 LIMIT 1",
            (filled.big_tenant,),
        ).fetchone()
        assert row is not None
        cursor = write_cursor(row[0], row[1])
    query, params = lists.run_list_query(filled.big_tenant, filters.checked(), cursor, 51)
    scans = plan_of(conn, query, params)
    assert not [s for s in scans if s.startswith("Seq Scan")], scans
    assert any(s.endswith(f"using {one}") for s in scans for one in index.split()), scans


def test_a_page_of_batches_and_their_progress_are_read_from_indexes(
    busy: tuple[Filled, psycopg.Connection[Any]],
) -> None:
    filled, conn = busy
    for filters in (
        lists.BatchFilters(),
        lists.BatchFilters(status="done"),
        lists.BatchFilters(needs_review=True),
    ):
        params = lists.batch_list_query(filled.big_tenant, filters.checked(), None, 21)
        scans = plan_of(conn, "list_batches", params)
        assert not [s for s in scans if s.startswith("Seq Scan")], (filters, scans)
        assert "Index Scan on batch using batch_tenant_created_idx" in scans, scans
        # Each batch's runs are counted from the batch's own index entries.
        assert any(s.endswith("using pipeline_run_batch_status_idx") for s in scans), scans


def test_the_home_pages_counts_read_at_most_their_cap_from_indexes(
    busy: tuple[Filled, psycopg.Connection[Any]],
) -> None:
    filled, conn = busy
    now = datetime.now(UTC)
    statuses = ["queued", "done", "needs_review"]
    long_ago = datetime(1, 1, 1, tzinfo=UTC)
    counts = plan_of(
        conn,
        "run_counts",
        {
            "tenant_id": filled.big_tenant,
            "statuses": statuses,
            "sinces": [long_ago, now - timedelta(days=1), long_ago],
            "cap": lists.COUNT_CAP,
        },
    )
    assert counts == ["Index Only Scan on pipeline_run using pipeline_run_tenant_status_idx"]
    backlog = plan_of(conn, "review_backlog", {"tenant_id": filled.big_tenant, "cap": 10_000})
    assert not [s for s in backlog if s.startswith("Seq Scan")], backlog
    assert all("pipeline_run_review_idx" in s or "status_idx" in s for s in backlog), backlog


def prefix_index_scans(
    conn: psycopg.Connection[Any], params: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The nodes of list_runs_by_document's plan, run with ``params``, that read
    pipeline_run_document_created_idx (with their actual loops and heap fetches)."""
    sql = f"EXPLAIN (ANALYZE, FORMAT JSON) {load_queries()['list_runs_by_document']}"
    row = conn.execute(sql.encode(), params, prepare=False).fetchone()
    assert row is not None
    found: list[Mapping[str, Any]] = []

    def walk(node: Mapping[str, Any]) -> None:
        if node.get("Index Name") == "pipeline_run_document_created_idx":
            found.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(row[0][0]["Plan"])
    return found


def test_a_prefix_most_recent_runs_share_is_read_in_time_order_a_rare_one_from_its_index(
    busy: tuple[Filled, psycopg.Connection[Any]],
) -> None:
    filled, conn = busy
    common = lists.run_list_query(filled.big_tenant, lists.RunFilters(document="doc-"), None, 51)
    [scan] = prefix_index_scans(conn, common[1])
    assert scan["Actual Loops"] == 0, "the newest runs held the page: the prefix's not read"
    rare = lists.run_list_query(filled.big_tenant, lists.RunFilters(document="doc-1234"), None, 51)
    [scan] = prefix_index_scans(conn, rare[1])
    assert scan["Actual Loops"] == 1
    # From the index alone: no heap row per match, only the page's rows by id.
    assert scan["Node Type"] == "Index Only Scan" and scan["Heap Fetches"] == 0, scan


@pytest.mark.parametrize(
    ("prefix", "status"),
    [
        ("doc-", None),  # every run's
        ("doc-1", None),  # most runs' of a stretch of the history
        ("doc-12", None),
        ("doc-1234", None),  # a handful of runs
        ("doc-1", "done"),
        ("doc-12", "failed"),
        ("doc-x", None),  # none
    ],
)
def test_pages_by_document_prefix_list_what_sorting_every_match_would(
    busy: tuple[Filled, psycopg.Connection[Any]], prefix: str, status: str | None
) -> None:
    filled, conn = busy
    expected = [
        r[0]
        for r in conn.execute(
            b"SELECT id::text FROM pipeline_run WHERE tenant_id = %s AND document_id LIKE %s"
            b" AND (%s::text IS NULL OR status = %s) ORDER BY created_at DESC, id DESC LIMIT 160",
            (filled.big_tenant, prefix + "%", status, status),
        )
    ]
    db = Database(filled.url, max_size=1)
    listed: list[str] = []
    cursor = None
    try:
        for _ in range(4):  # pages of 40, each after the one before
            page = lists.list_runs(
                db,
                filled.big_tenant,
                lists.RunFilters(document=prefix, status=status),
                cursor=cursor,
                limit=40,
            )
            listed += [r.run_id for r in page.runs]
            assert all(r.document_id.startswith(prefix) for r in page.runs)
            if (cursor := page.next_cursor) is None:
                break
    finally:
        db.close()
    assert listed == expected
