"""``docpipe batch submit | watch | cancel | results | list``: many documents through the batch
lane, and their results out in bulk."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn

from docpipe.cli.client import DEFAULT_PIPELINE, DocpipeClient
from docpipe.cli.common import add_api_flags, api_client, console, errors
from docpipe.cli.failures import ExitCode
from docpipe.cli.lists import add_batch_list
from docpipe.cli.uploads import FILE_SUFFIXES, print_summary, upload_files

__all__ = ["batch_sentence", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batch = sub.add_parser(
        "batch",
        help="many documents at once, through the batch lane: submit, watch, cancel, results, list",
        description="A batch is many documents sent in one request. Its runs wait in the "
        "database and are admitted a few at a time, each tenant getting its fair share of "
        "the batch workers.",
    )
    batch_sub = batch.add_subparsers(dest="batch_command", required=True, metavar="COMMAND")
    submit = batch_sub.add_parser(
        "submit",
        help="send files, or folders of text, PDF, Word and image files, as one batch",
        description="Stores every file named, and every .txt, .pdf, .docx, .png, .jpg, "
        ".jpeg, .tif and .tiff file of each "
        "folder, as a document, then sends them as one batch; prints the batch's id and how "
        "many documents it holds. A file the API refuses is named on stderr with the reason "
        "and the others go on; the exit code is 1 if any was refused.",
    )
    submit.add_argument(
        "paths",
        nargs="+",
        metavar="DIR|FILE",
        help="files, or folders (their text, PDF, Word and image files)",
    )
    submit.add_argument(
        "--pipeline",
        default=DEFAULT_PIPELINE,
        help="the pipeline every document runs, as name:vN (default: %(default)s)",
    )
    submit.add_argument(
        "--budget-usd",
        metavar="DOLLARS",
        help="stop the batch once its runs have cost this much, e.g. 5.00 (default: no "
        "budget for the batch; each run still has the deployment's default budget)",
    )
    submit.add_argument(
        "--provider-batch",
        action="store_true",
        help="half price, no hurry: the runs' calls go through the providers' batch "
        "interfaces (answered within their completion window, 24h at most) at their "
        "discount; calls to a provider without one are sent at once",
    )
    submit.add_argument(
        "--callback-url",
        metavar="URL",
        help="the API POSTs a signed webhook here when the batch ends (needs webhooks turned "
        "on and your tenant's signing secret: docpipe webhook-secret rotate)",
    )
    submit.add_argument(
        "--watch",
        action="store_true",
        help="stay and show progress bars until the batch ends; the exit code is 1 unless "
        "it ended done",
    )
    submit.set_defaults(handler=cmd_batch_submit)
    watch = batch_sub.add_parser(
        "watch",
        help="progress bars per run status, the cost so far and an ETA, until it ends",
        description="Shows the batch's runs by status, its steps done, its cost so far and "
        "an ETA until the batch ends. Exit code 1 unless it ended done.",
    )
    watch.add_argument("batch_id", metavar="BATCH_ID", help="the id docpipe batch submit printed")
    watch.set_defaults(handler=cmd_batch_watch)
    cancel = batch_sub.add_parser(
        "cancel",
        help="stop a batch: no step that has not started will run",
        description="Cancels the batch: steps running now finish, no other step starts, and "
        "what finished stays readable. A batch that has ended already is a conflict (409).",
    )
    cancel.add_argument("batch_id", metavar="BATCH_ID", help="the id docpipe batch submit printed")
    cancel.set_defaults(handler=cmd_batch_cancel)
    results = batch_sub.add_parser(
        "results",
        help="every run's results as JSON lines, CSV or an Excel workbook",
        description="Downloads the batch's results in the order the documents were sent: one "
        "JSON line per run (its outputs, values with evidence, review decisions, cost and "
        "error), a CSV with one row per document and the pipeline's fields as titled "
        "columns, or an XLSX workbook with a values sheet and an evidence sheet. A JSON or "
        "CSV download cut off part-way goes on where it stopped, so each run is written "
        "once; a workbook starts again. What the export has no column for, and cells cut at "
        "a spreadsheet's 32,767 characters, are said on standard error.",
    )
    results.add_argument("batch_id", metavar="BATCH_ID", help="the id docpipe batch submit printed")
    results.add_argument(
        "--format",
        choices=("jsonl", "csv", "xlsx"),
        default="jsonl",
        help="JSON lines (default), CSV, or XLSX (needs -o FILE)",
    )
    results.add_argument(
        "--evidence",
        action="store_true",
        help="CSV and XLSX: each value's quote, page and what its evidence says (supported, "
        "quote found, value not in it, quote not in the document, corrected by NAME) in "
        "columns after it",
    )
    results.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (default: standard output)"
    )
    results.add_argument(
        "--status",
        help="only these (comma-separated): succeeded, failed, needs_review, "
        "cancelled, pending, or run statuses",
    )
    results.set_defaults(handler=cmd_batch_results)
    for parser in (submit, watch, cancel, results):
        add_api_flags(parser)
    add_batch_list(batch_sub)


def _batch_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        files += (
            sorted(p for p in path.iterdir() if p.suffix.lower() in _FOLDER_SUFFIXES)
            if path.is_dir()
            else [path]
        )
    return files


# What a folder contributes: text, PDF and Word files.
_FOLDER_SUFFIXES = (".txt", *FILE_SUFFIXES)


def cmd_batch_submit(args: argparse.Namespace) -> int:
    """Each file stored as a document first (a refused one is named, the others go on),
    then one batch of the stored ones."""
    files = _batch_files(args.paths)
    if not files:
        found = ", ".join(_FOLDER_SUFFIXES)
        errors.print(f"no files ({found}) in {' '.join(args.paths)}", highlight=False)
        return ExitCode.USAGE
    options: dict[str, Any] = {"pipeline": args.pipeline}
    if args.budget_usd:
        options["budget_usd"] = args.budget_usd
    if args.callback_url:
        options["callback_url"] = args.callback_url
    if args.provider_batch:
        options["provider_batch"] = True
    with api_client(args, timeout_s=300) as client:
        uploads = upload_files(client, files)
        if not uploads.stored:
            print_summary(len(files), 0, uploads.refused)
            return ExitCode.NOT_DONE
        documents = [{"id": doc_id} for _, doc_id in uploads.stored]
        accepted = client.submit_batch(documents, **options)
        console.print(f"batch {accepted['batch_id']}: {accepted['runs_total']} documents")
        done = _watch_batch(client, accepted["batch_id"]) == 0 if args.watch else True
    print_summary(len(files), len(uploads.stored), uploads.refused)
    return ExitCode.OK if done and not uploads.refused else ExitCode.NOT_DONE


def cmd_batch_watch(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        return _watch_batch(client, args.batch_id)


def cmd_batch_cancel(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        status = client.cancel_batch(args.batch_id)
    console.print(batch_sentence(status), highlight=False, soft_wrap=True)
    return 0


def cmd_batch_results(args: argparse.Namespace) -> int:
    if args.format == "xlsx" and args.output is None:
        errors.print("a workbook is a file: give -o FILE.xlsx", highlight=False)
        return ExitCode.USAGE
    options: dict[str, Any] = {"status": args.status, "evidence": args.evidence}
    # A download takes as long as the batch is big; each read still has the usual timeout.
    with api_client(args) as client:
        if args.format == "xlsx":
            with Path(args.output).open("w+b") as book:
                saved = client.save_batch_workbook(args.batch_id, book, **options)
        elif args.output is None:
            saved = client.save_batch_results(
                args.batch_id, sys.stdout.buffer, format=args.format, **options
            )
        else:
            with Path(args.output).open("wb") as out:
                saved = client.save_batch_results(args.batch_id, out, format=args.format, **options)
    # The results alone on stdout (for pipes); the notes on stderr.
    where = f" written to {args.output}" if args.output else ""
    print(f"batch {args.batch_id}: {saved.runs} runs{where}", file=sys.stderr)
    if saved.omitted:
        print(f"no column for: {saved.omitted}", file=sys.stderr)
    if saved.cut_cells:
        from docpipe.pipelines.columns import MAX_CELL_CHARS

        print(
            f"{saved.cut_cells} cells longer than {MAX_CELL_CHARS:,} characters cut (a "
            "spreadsheet holds no more; the JSON lines hold them whole)",
            file=sys.stderr,
        )
    return 0


def _watch_batch(client: DocpipeClient, batch_id: str) -> int:
    """One bar per run status and one for steps, with cost and ETA, until the batch ends."""
    progress = Progress(
        TextColumn("{task.description:18}"),
        BarColumn(),
        TextColumn("{task.completed:>6.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[note]}"),
        console=console,
    )
    with progress:
        steps = progress.add_task("steps", total=1, note="")
        bars: dict[str, Any] = {}
        while True:
            status = client.batch(batch_id)
            eta = status["eta_s"]
            progress.update(
                steps,
                total=status["steps_total"],
                completed=status["steps_done"],
                note=f"${status['cost_so_far_usd']:.6f}"
                + (f"  ETA {eta:.0f}s" if eta is not None else ""),
            )
            for run_status in sorted({*status["runs_by_status"], *bars}):
                if run_status not in bars:
                    bars[run_status] = progress.add_task(
                        f"runs {run_status}", total=status["runs_total"], note=""
                    )
                progress.update(
                    bars[run_status], completed=status["runs_by_status"].get(run_status, 0)
                )
            if status["status"] != "running":
                break
            time.sleep(0.5)
    console.print(batch_sentence(status), highlight=False, soft_wrap=True)
    return ExitCode.OK if status["status"] == "done" else ExitCode.NOT_DONE


def batch_sentence(status: dict[str, Any]) -> str:
    """How a batch stands, as a sentence: "Batch 1f0c... is done: all 20 runs done, in
    2m 5s, for $0.050995." or "... is cancelled: 12 of 20 runs done, 3 failed, 5 cancelled
    ...". What the next command is, when runs need a person: the batch's own, to copy."""
    by_status = {k: v for k, v in status["runs_by_status"].items() if v}
    total, done = status["runs_total"], by_status.pop("done", 0)
    runs = f"all {total} runs done" if done == total else f"{done} of {total} runs done"
    others = ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in sorted(by_status.items()))
    took = ""
    if status.get("finished_at") and status.get("created_at"):
        ended, began = (datetime.fromisoformat(status[k]) for k in ("finished_at", "created_at"))
        seconds = (ended - began).total_seconds()
        took = f", in {_duration(seconds)}"
    sentence = (
        f"Batch {status['batch_id']} is {status['status']}: {runs}"
        + (f", {others}" if others else "")
        + f"{took}, for ${status['cost_so_far_usd']:.6f}."
    )
    if by_status.get("needs_review"):
        sentence += (
            f" 'docpipe review list --batch {status['batch_id']}' shows the runs waiting for a "
            "person."
        )
    return sentence


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs}s" if minutes else f"{seconds:.1f}s"
