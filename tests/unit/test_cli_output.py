"""What the ``docpipe`` command prints where no terminal reads it, and its sentences: tables
as tab-separated lines with nothing cut, a batch's end, a run's summary, the dashboard's
figures, a wrong --set."""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from docpipe.cli import common
from docpipe.cli.batches import batch_sentence
from docpipe.cli.lists import dashboard_lines
from docpipe.cli.results import results_table
from docpipe.cli.runs import run_summary, steps_table

REASON = (
    "extract_text: the document is unreadable (empty_text): none of its 1 pages gave any "
    "text, which is a reason far longer than a column of a 160-character table can hold"
)


def step(name: str, **changes: Any) -> dict[str, Any]:
    return {
        "step": name,
        "status": "done",
        "attempt": 1,
        "model": "gpt-4o-mini",
        "input_tokens": 1000,
        "output_tokens": 200,
        "cost_usd": 0.00027,
        "error": None,
        "started_at": "2026-12-01T10:00:00+00:00",
        "finished_at": "2026-12-01T10:00:02.5+00:00",
        "reviewed": None,
    } | changes


def run(**changes: Any) -> dict[str, Any]:
    return {
        "run_id": "88e3aa20-85e7-4237-8320-912eb835f7b6",
        "document_id": "01-distribution-umber-energy-inc",
        "pipeline": "document_extract:v1",
        "status": "failed",
        "lane": "interactive",
        "batch_id": None,
        "steps_done": 1,
        "steps_total": 4,
        "cost_so_far_usd": 0.00027,
        "error": REASON,
        "steps": [step("extract_text", model=None, input_tokens=None, output_tokens=None)],
        "result": {"extract_text": {"format": "text"}},
        "values": None,
        "review": None,
    } | changes


@pytest.fixture
def piped(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """The command's console as it is when stdout is a pipe: 160 columns, no terminal."""
    out = io.StringIO()
    monkeypatch.setattr(common, "console", Console(file=out, width=160, force_terminal=False))
    return out


def test_a_table_in_a_pipe_is_tab_separated_lines_with_nothing_cut(piped: io.StringIO) -> None:
    common.show(results_table([("00-dummy-empty", run()), ("01-contract", run())]))
    lines = piped.getvalue().splitlines()
    assert lines[0] == "# docpipe results"
    assert lines[1].split("\t") == [
        "document",
        "format",
        "pipeline",
        "status",
        "found",
        "evidence",
        "tokens",
        "cost USD",
        "attempts",
        "note",
    ]
    first = lines[2].split("\t")
    assert first[0] == "00-dummy-empty" and first[3] == "failed"
    assert first[-1] == REASON, "the whole reason, on the document's line"
    assert len(lines) == 5  # title, header, two runs, the total


def test_a_cells_lines_are_joined_and_markup_is_dropped(piped: io.StringIO) -> None:
    table = steps_table([step("fields", error="line one\nline [b]two[/b]")])
    common.show(table)
    assert piped.getvalue().splitlines()[2].endswith("\tline one / line two")


def test_on_a_terminal_a_table_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(
        common, "console", Console(file=out, width=120, force_terminal=True, no_color=True)
    )
    common.show(steps_table([step("fields")]))
    assert "┏━━" in out.getvalue() and "step" in out.getvalue() and "\t" not in out.getvalue()


def test_a_batch_ends_with_a_sentence() -> None:
    status = {
        "batch_id": "1f0c",
        "status": "done",
        "runs_total": 20,
        "runs_by_status": {"done": 17, "failed": 2, "needs_review": 1, "cancelled": 0},
        "cost_so_far_usd": 0.050995,
        "created_at": "2026-12-01T10:00:00Z",
        "finished_at": "2026-12-01T10:02:05Z",
    }
    assert batch_sentence(status) == (
        "Batch 1f0c is done: 17 of 20 runs done, 2 failed, 1 needs review, in 2m 5s, for "
        "$0.050995. 'docpipe review list --batch 1f0c' shows the runs waiting for a person."
    )
    status |= {"runs_by_status": {"done": 20}, "finished_at": "2026-12-01T10:00:09.5Z"}
    assert batch_sentence(status) == "Batch 1f0c is done: all 20 runs done, in 9.5s, for $0.050995."


def test_a_runs_summary_says_how_it_stands_and_what_to_do_next() -> None:
    waiting = run(
        status="needs_review",
        error=None,
        steps_done=3,
        review={"step": "extract_fields", "reason": "rule", "reasons": [{"message": "x < 1"}]},
        values=[{"supported": True}, {"supported": False}],
    )
    assert run_summary(waiting) == [
        "run 88e3aa20-85e7-4237-8320-912eb835f7b6  01-distribution-umber-energy-inc  "
        "document_extract:v1  needs_review",
        "  3/4 steps done, 0 tokens, $0.000270, interactive lane",
        "  waits for a person after step extract_fields: x < 1 ('docpipe review show "
        "88e3aa20-85e7-4237-8320-912eb835f7b6')",
        "  2 values, 1/2 supported by their quote ('docpipe results "
        "88e3aa20-85e7-4237-8320-912eb835f7b6')",
    ]
    assert f"  error: {REASON}" in run_summary(run())


def test_the_dashboards_figures_are_three_lines_and_a_count_at_its_cap_says_at_least() -> None:
    home = {
        "runs_by_status": {"queued": 10_000, "running": 3, "needs_review": 2, "done": 41},
        "ended_since": "2026-12-04T10:00:00+01:00",
        "review_waiting": 2,
        "review_oldest_since": "2026-12-05T08:30:00Z",
        "cap": 10_000,
    }
    now = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    assert dashboard_lines(home, now) == [
        "going on: 10,000+ queued, 3 running",
        "waiting for a person: 2 runs, the oldest for 30m ('docpipe review list')",
        "ended since 2026-12-04 09:00 UTC: 41 done, 0 failed, 0 cancelled, 0 expired, "
        "0 budget exceeded",
    ]
    idle = home | {"review_waiting": 0, "review_oldest_since": None}
    assert dashboard_lines(idle, now)[1] == "waiting for a person: 0 runs"


def test_a_set_value_that_is_not_json_is_one_line_with_exit_2_and_the_quoting() -> None:
    argv = ["review", "approve", "r1", "--set", "/fields/governing_law/value=Germany"]
    done = subprocess.run(
        [sys.executable, "-m", "docpipe.cli", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: --set '/fields/governing_law/value=Germany': the value is not JSON; quote a "
        "string as JSON, e.g. --set '/fields/governing_law/value=\"Germany\"'"
    ]
