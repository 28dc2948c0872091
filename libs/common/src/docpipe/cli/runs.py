"""``docpipe submit | watch | status``: single documents through the interactive lane."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from docpipe.cli.client import DEFAULT_PIPELINE, ApiError, DocpipeClient
from docpipe.cli.common import add_api_flags, api_client, console, show
from docpipe.cli.failures import ExitCode
from docpipe.cli.results import evidence_count, results_table
from docpipe.cli.uploads import Refusal, attempt, print_summary, upload_files
from docpipe.statuses import ENDED_RUN_STATUSES, Lane

__all__ = ["Submitted", "register", "submit_files", "watch_runs"]

POLL_INTERVAL_S = 1.0  # one request per poll for every run watched


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = sub.add_parser(
        "submit",
        help="upload documents and start a run of a pipeline on each",
        description="Uploads each FILE as a document named after it (a .pdf, .docx, .png, "
        ".jpg, .jpeg, .tif or .tiff as a file, anything else as UTF-8 text) and starts a run "
        "of the pipeline on it. Prints one line per run on stdout: its id and the document. "
        "Submitting the same file again gives the same run. A file the API refuses (too "
        "large, of another format, unreadable) is named on stderr with the reason and the "
        "others go on; a summary ends the command, and the exit code is 1 if any file was "
        "refused.",
    )
    submit.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="documents: PDF, Word (.docx), image (PNG, JPEG, TIFF) or text files",
    )
    submit.add_argument(
        "--lane",
        choices=list(Lane),
        default=Lane.INTERACTIVE,
        help="interactive: start at once, on the interactive workers (default); batch: wait "
        "for room in the batch lane, which shares its workers fairly between tenants (for "
        "many documents that need not be fast)",
    )
    submit.add_argument(
        "--pipeline",
        default=DEFAULT_PIPELINE,
        help="the pipeline to run, as name:vN (default: %(default)s; 'docpipe pipelines "
        "list' shows the others)",
    )
    submit.add_argument(
        "--watch",
        action="store_true",
        help="stay, show each run's progress until all have ended, then the results table; "
        "the exit code is 1 unless every run ended done",
    )
    submit.set_defaults(handler=cmd_submit)
    watch = sub.add_parser(
        "watch",
        help="live progress of runs until they end, then the results table",
        description="Shows a progress bar per run (steps done, status, cost) until every run "
        "has ended, then the results table. Exit code 1 unless every run ended done.",
    )
    watch.add_argument(
        "run_ids", nargs="+", metavar="RUN_ID", help="run ids, as docpipe submit prints them"
    )
    watch.set_defaults(handler=cmd_watch)
    status = sub.add_parser(
        "status",
        help="how a run stands: its status, cost and each step (--json: everything)",
        description="Prints a run's summary (status, steps done, tokens, cost, its error or "
        "why it waits for a person) and a table of its steps (status, attempts, model, "
        "tokens, cost, time). --json prints what GET /runs/{id} answers, the outputs too.",
    )
    status.add_argument("run_id", metavar="RUN_ID", help="a run id, as docpipe submit prints it")
    status.add_argument(
        "--json", action="store_true", help="everything GET /runs/{id} answers, as JSON"
    )
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
        start = partial(
            client.extract,
            doc_id,
            idempotency_key=f"cli:{doc_id}:{lane}:{pipeline}",
            lane=lane,
            pipeline=pipeline,
        )
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
    return ExitCode.OK if all_done and not submitted.refused else ExitCode.NOT_DONE


def cmd_watch(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        return _all_done(watch_runs(client, [(run_id, run_id) for run_id in args.run_ids]))


def cmd_status(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        run = client.run(args.run_id)
    if args.json:
        console.print_json(json.dumps(run))
        return 0
    for line in run_summary(run):
        console.print(line, highlight=False, soft_wrap=True)
    show(steps_table(run["steps"]))
    return 0


def run_summary(run: dict[str, Any]) -> list[str]:
    """A run in a few lines: what it is, how far it got and for what, and what to do next."""
    steps = run["steps"]
    tokens = sum((s["input_tokens"] or 0) + (s["output_tokens"] or 0) for s in steps)
    lines = [
        f"run {run['run_id']}  {run['document_id']}  {run['pipeline']}  {run['status']}",
        f"  {run['steps_done']}/{run['steps_total']} steps done, {tokens:,} tokens, "
        f"${run['cost_so_far_usd']:.6f}, {run['lane']} lane"
        + (f", batch {run['batch_id']}" if run.get("batch_id") else ""),
    ]
    if run.get("error"):
        lines.append(f"  error: {run['error']}")
    if review := run.get("review"):
        why = "; ".join(r["message"] for r in review["reasons"]) or review["reason"]
        lines.append(
            f"  waits for a person after step {review['step']}: {why} "
            f"('docpipe review show {run['run_id']}')"
        )
    if values := run.get("values"):
        lines.append(
            f"  {len(values)} values, {evidence_count(values)} supported by their quote "
            f"('docpipe results {run['run_id']}')"
        )
    return lines


def steps_table(steps: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="steps", title_justify="left")
    for column in ("step", "status", "attempts", "model", "tokens", "cost USD", "took", "note"):
        right = column in ("attempts", "tokens", "cost USD", "took")
        table.add_column(column, justify="right" if right else "left", overflow="fold")
    for s in steps:
        tokens = (s["input_tokens"] or 0) + (s["output_tokens"] or 0)
        took = ""
        if s.get("started_at") and s.get("finished_at"):
            began, ended = (datetime.fromisoformat(s[k]) for k in ("started_at", "finished_at"))
            took = f"{(ended - began).total_seconds():.1f}s"
        note = s.get("error") or (f"reviewed: {s['reviewed']}" if s.get("reviewed") else "")
        table.add_row(
            s["step"],
            s["status"],
            str(s["attempt"]),
            s.get("model") or "",
            f"{tokens:,}" if tokens else "",
            f"{s['cost_usd']:.6f}" if s.get("cost_usd") is not None else "",
            took,
            note,
        )
    return table


def _all_done(final: dict[str, dict[str, Any]]) -> int:
    return ExitCode.OK if all(s["status"] == "done" for s in final.values()) else ExitCode.NOT_DONE


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
                raise ApiError(404, f"no run {', '.join(missing[:5])}")
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
    show(results_table([(doc, final[run_id]) for doc, run_id in runs]))
    return final
