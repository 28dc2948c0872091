"""``docpipe results RUN_ID...``, and the tables that show what runs found: each value with
the passage it was read from, and outputs of any shape as lines a person reads (a list one
item a line, long text wrapped at word boundaries), never as JSON cut off."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from docpipe.cli.common import add_api_flags, api_client, console, show
from docpipe.cli.failures import ExitCode

__all__ = ["evidence_count", "readable", "register", "results_table", "run_results"]

# A value this long or shorter fits the results table's "found" column as it is.
_SHORT = 40


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    results = sub.add_parser(
        "results",
        help="the values runs found, each with the passage it was read from",
        description="Prints, for each run, the values it extracted with their evidence (the "
        "quote, its page and section, and whether the quote is in the document) and its last "
        "step's output. Exit code 1 unless every run ended done.",
    )
    results.add_argument(
        "run_ids", nargs="+", metavar="RUN_ID", help="run ids, as docpipe submit prints them"
    )
    results.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of tables: a list with one object per run (run_id, "
        "document_id, pipeline, status, error, values, result)",
    )
    add_api_flags(results)
    results.set_defaults(handler=cmd_results)


def cmd_results(args: argparse.Namespace) -> int:
    from docpipe.cli.client import ApiError

    with api_client(args) as client:
        found = client.runs(args.run_ids)
    if missing := [run_id for run_id in args.run_ids if run_id not in found]:
        raise ApiError(404, f"no run {', '.join(missing[:5])}")
    runs = [found[run_id] for run_id in args.run_ids]
    if args.json:
        keys = ("run_id", "document_id", "pipeline", "status", "error", "values", "result")
        print(json.dumps([{k: run.get(k) for k in keys} for run in runs], indent=2))
    else:
        for run in runs:
            for part in run_results(run).renderables:
                show(part)
    return ExitCode.OK if all(r["status"] == "done" for r in runs) else ExitCode.NOT_DONE


def run_results(run: dict[str, Any]) -> Group:
    """One run: a heading, its values with evidence, and its last step's output."""
    heading = Text.assemble(
        (f"run {run['run_id']}", "bold"),
        f"  {run['document_id']}  {run['pipeline']}  {run['status']}",
    )
    if run.get("error"):
        heading.append(f"\n{run['error']}", style="red")
    parts: list[RenderableType] = [heading]
    if run.get("values"):
        parts.append(values_table(run["values"]))
    result = run.get("result") or {}
    if result:
        step, output = list(result.items())[-1]
        parts.append(output_table(step, output))
    return Group(*parts, "")


def values_table(values: Sequence[dict[str, Any]], width: int | None = None) -> Table:
    """Each value with its evidence; ``width`` (the console's, by default) is shared so
    that the quote, the longest, keeps the most room, and every column wraps at words."""
    room = (width or console.width) - max(len(v["field"]) for v in values) - 4 - 16
    table = Table(title="values and their evidence", title_justify="left", show_lines=True)
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold", width=min(30, max(12, room * 3 // 10)))
    table.add_column("page", justify="right")
    table.add_column("section", overflow="fold", width=min(22, max(11, room // 5)))
    table.add_column("evidence", overflow="fold")
    from docpipe.pipelines.evidence import Support, support_label, support_of

    for v in values:
        section = " ".join(str(s) for s in (v.get("section"), v.get("section_title")) if s)
        quote = Text(v.get("quote") or "")
        support = support_of(v)
        if support is Support.CORRECTED:
            quote = Text.assemble((support_label(v), "blue"))
        elif support is not Support.SUPPORTED:
            quote = Text.assemble((f"{support_label(v)}: ", "red"), quote)
        table.add_row(
            v["field"], readable(v.get("value")), str(v.get("page") or ""), section, quote
        )
    return table


def output_table(step: str, output: Any) -> Table:
    """A step's output, one row per key, each value :func:`readable`."""
    table = Table(title=f"{step} (the last step's output)", title_justify="left", show_lines=True)
    table.add_column("key", overflow="fold", no_wrap=True)
    table.add_column("value", overflow="fold")
    items = output.items() if isinstance(output, dict) else [("", output)]
    for key, value in items:
        table.add_row(str(key), readable(value))
    return table


def readable(value: Any) -> str:
    """A JSON value as lines a person reads: an object one key a line, a list one item a
    line (``•``), nested values indented under their key; text as it is (the table wraps
    it at word boundaries)."""
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines.append(f"{key}:")
                lines += ["  " + line for line in readable(item).splitlines()]
            else:
                lines.append(f"{key}: {readable(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return "(none)"
        lines = []
        for item in value:
            first, *rest = readable(item).splitlines() or [""]
            lines += [f"• {first}", *("  " + line for line in rest)]
        return "\n".join(lines)
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def results_table(rows: Sequence[tuple[str, dict[str, Any]]]) -> Table:
    """The summary of many runs that ``docpipe watch`` and ``make run`` end with."""
    table = Table(title="docpipe results")
    columns = (
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
    )
    # Only the columns of words (found, note) wrap: a document's name, a pipeline, a figure
    # is one word, kept whole. (A minimum width on the document column instead left rich
    # a table wider than the terminal, cut on the right: the note, a failure's reason, went.)
    for column in columns:
        table.add_column(
            column,
            justify="right" if column in ("tokens", "cost USD") else "left",
            overflow="fold",
            no_wrap=column not in ("found", "note"),
        )
    total_cost = 0.0
    for doc, status in rows:
        tokens = sum((s["input_tokens"] or 0) + (s["output_tokens"] or 0) for s in status["steps"])
        attempts = sum(s["attempt"] for s in status["steps"])
        total_cost += status["cost_so_far_usd"]
        table.add_row(
            doc,
            _format(status.get("result") or {}),
            status["pipeline"],
            status["status"],
            _found(status.get("result") or {}),
            evidence_count(status.get("values")),
            f"{tokens:,}",
            f"{status['cost_so_far_usd']:.6f}",
            str(attempts),
            status.get("error") or "",
        )
    table.add_section()
    table.add_row("total", "", "", "", "", "", "", f"{total_cost:.6f}", "", "")
    return table


def _format(result: dict[str, Any]) -> str:
    """What the document was, from its extract_text output: "pdf", "pdf+ocr" (some pages
    read by OCR)."""
    extracted = result.get("extract_text") or {}
    if not extracted:
        return ""
    return f"{extracted['format']}{'+ocr' if extracted.get('ocr_pages') else ''}"


def evidence_count(values: list[dict[str, Any]] | None) -> str:
    """``supported/total``: of the run's values, how many their quote supports (found in
    the document, the value in it; empty for a pipeline that records no evidence), and how
    many a reviewer corrected (a person, not a quote, stands behind those)."""
    if not values:
        return ""
    from docpipe.pipelines.evidence import Support, support_of

    supported = sum(1 for v in values if v["supported"])
    corrected = sum(1 for v in values if support_of(v) is Support.CORRECTED)
    return f"{supported}/{len(values)}" + (f", {corrected} corrected" if corrected else "")


def _found(result: dict[str, Any]) -> str:
    """What a finished run found, in a few lines: the contract's fields counted, else the
    last step's short values (``verdict: sign``) and its lists counted; long text is left
    to ``docpipe results``."""
    if "extract_fields" in result:
        return f"{len(result['extract_fields'].get('fields') or {})} fields"
    last = list(result.values())[-1] if result else {}
    if not isinstance(last, dict):
        return ""
    lines = []
    for key, value in last.items():
        if isinstance(value, list):
            lines.append(f"{key}: {len(value)}")
        elif not isinstance(value, dict) and len(readable(value)) <= _SHORT:
            lines.append(f"{key}: {readable(value)}")
    return "\n".join(lines)
