"""Named SQL: one file of queries for each state module, every query in the file of the module
that runs it, and no name defined twice."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

import pytest

from docpipe.state.db import load_queries, read_queries

STATE = Path(str(files("docpipe.state")))
QUERIES = STATE / "sql" / "queries"
# The gauges beat exports read PostgreSQL with queries of their own.
GAUGES = STATE.parent / "worker" / "state_collector.py"


def names_in(sql: Path) -> list[str]:
    return re.findall(r"^-- name: (\w+)\s*$", sql.read_text(encoding="utf-8"), re.MULTILINE)


@pytest.mark.parametrize("sql", sorted(QUERIES.glob("*.sql")), ids=lambda p: p.name)
def test_each_file_holds_the_queries_its_module_runs(sql: Path) -> None:
    module = GAUGES if sql.stem == "gauges" else STATE / f"{sql.stem}.py"
    assert module.exists(), f"{sql.name} names no module of docpipe.state"
    code = module.read_text(encoding="utf-8")
    unused = [name for name in names_in(sql) if not re.search(rf"[\"']{name}[\"']", code)]
    assert unused == [], f"{module.name} does not run {unused}: move them beside their module"


def test_every_file_is_read() -> None:
    assert set(load_queries()) == {n for sql in QUERIES.glob("*.sql") for n in names_in(sql)}


def test_a_name_defined_twice_is_refused_naming_both_files(tmp_path: Path) -> None:
    (tmp_path / "runs.sql").write_text("-- name: claim_step\nSELECT 1;\n")
    (tmp_path / "batches.sql").write_text("-- name: claim_step\nSELECT 2;\n")
    with pytest.raises(RuntimeError, match=r"'claim_step' is defined twice: in batches.sql and"):
        read_queries(tmp_path)
