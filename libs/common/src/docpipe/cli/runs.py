"""``docpipe submit | watch | status``: single documents through the interactive lane."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from docpipe.cli.client import DEFAULT_PIPELINE, ApiError, DocpipeClient
from docpipe.cli.common import add_api_flags, api_client, console
from docpipe.cli.uploads import Refusal, attempt, print_summary, upload_files
from docpipe.statuses import ENDED_RUN_STATUSES, Lane

__all__ = ["Submitted", "evidence_count", "register", "results_table", "submit_files",
           "watch_runs"]  # fmt: skip

POLL_INTERVAL_S = 1.0  # one request per poll for every run watched


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = sub.add_parser("submit", help="upload files and start a run for each")
    submit.add_argument("files", nargs="+")
    submit.add_argument("--lane", choices=list(Lane), default=Lane.INTERACTIVE)
    submit.add_argument("--pipeline", default=DEFAULT_PIPELINE, help="a key of docpipe pipelines")
    submit.add_argument("--watch", action="store_true")
    submit.set_defaults(handler=cmd_submit)
    watch = sub.add_parser("watch", help="live progress bars of runs")
    watch.add_argument("run_ids", nargs="+")
    watch.set_defaults(handler=cmd_watch)
    status = sub.add_parser("status", help="a run's status as JSON")
    status.add_argument("run_id")
    status.set_defaults(handler=cmd_status)
    for parser in (submit, watch, status):
        add_api_flags(parser)


@dataclass
class Submitted:
    """The runs started, (document, run id), and the files refused on the way."""

    started: list[tuple[str, str]] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


def submit_files(
    client: DocpipeClient, files: Sequence[Path], lane: str, pipeline: str = DEFAULT_PIPELINE
) -> Submitted:
    """Upload each file as a document (docpipe.cli.uploads names them) and start a run of
    ``pipeline``; a file refused at either request is named and the others go on."""
    uploads = upload_files(client, files)
    submitted = Submitted(refused=uploads.refused)
    for path, doc_id in uploads.stored:
        start = partial(client.extract, doc_id, idempotency_key=f"cli:{doc_id}:{lane}:{pipeline}",
                        lane=lane, pipeline=pipeline)  # fmt: skip
        run = attempt(uploads, path, start)
        if run is not None:
            submitted.started.append((doc_id, run["run_id"]))
    return submitted


def cmd_submit(args: argparse.Namespace) -> int:
    files = [Path(f) for f in args.files]
    with api_client(args) as client:
        submitted = submit_files(client, files, args.lane, args.pipeline)
        for doc_id, run_id in submitted.started:
            console.print(f"{run_id}  {doc_id}")
        all_done = True
        if args.watch and submitted.started:
            all_done = _all_done(watch_runs(client, submitted.started)) == 0
    print_summary(len(files), len(submitted.started), submitted.refused)
    return 0 if all_done and not submitted.refused else 1


def cmd_watch(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        return _all_done(watch_runs(client, [(run_id, run_id) for run_id in args.run_ids]))


def cmd_status(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        console.print_json(json.dumps(client.run(args.run_id)))
    return 0


def _all_done(final: dict[str, dict[str, Any]]) -> int:
    return 0 if all(s["status"] == "done" for s in final.values()) else 1


def watch_runs(client: DocpipeClient, runs: Sequence[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """Live progress bars until every run has ended, then a results table; returns the
    final status of each run by id."""
    progress = Progress(
        TextColumn("{task.description:40}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} steps"),
        TextColumn("{task.fields[status]:13}"),
        TextColumn("${task.fields[cost]:.6f}"),
        TimeElapsedColumn(),
        console=console,
    )
    final: dict[str, dict[str, Any]] = {}
    with progress:
        bars = {
            run_id: progress.add_task(doc_id[:40], total=3, status="queued", cost=0.0)
            for doc_id, run_id in runs
        }
        while len(final) < len(runs):
            # One request for every run still going (per 100), not one per run: watching
            # many runs stays far below the key's requests per minute.
            going = [run_id for _, run_id in runs if run_id not in final]
            found = client.runs(going)
            if missing := [run_id for run_id in going if run_id not in found]:
                raise ApiError(404, f"no such runs: {', '.join(missing[:5])}")
            for run_id in going:
                status = found[run_id]
                progress.update(
                    bars[run_id],
                    total=status["steps_total"],
                    completed=status["steps_done"],
                    status=status["status"],
                    cost=status["cost_so_far_usd"],
                )
                if status["status"] in ENDED_RUN_STATUSES:
                    final[run_id] = status
                    progress.stop_task(bars[run_id])
            time.sleep(POLL_INTERVAL_S)
    console.print(results_table([(doc, final[run_id]) for doc, run_id in runs]))
    return final


def results_table(rows: Sequence[tuple[str, dict[str, Any]]]) -> Table:
    table = Table(title="docpipe results")
    columns = ("document", "format", "pipeline", "status", "found", "evidence", "tokens",
               "cost USD", "attempts", "note")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right" if column in ("tokens", "cost USD") else "left")
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
            (status.get("error") or "")[:60],
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
    """``supported/total``: of the run's values, how many quotes were found in the document
    (empty for a pipeline that records no evidence)."""
    if not values:
        return ""
    return f"{sum(1 for v in values if v['supported'])}/{len(values)}"


def _found(result: dict[str, Any]) -> str:
    """What a finished run found, in a few words: the contract's fields counted, else the
    first plain value of the last step's output."""
    if "extract_fields" in result:
        return f"{len(result['extract_fields'].get('fields') or {})} fields"
    last = list(result.values())[-1] if result else {}
    plain = next(((k, v) for k, v in last.items() if isinstance(v, str | int | float)), None)
    return f"{plain[0]}: {plain[1]}"[:40] if plain else ""
