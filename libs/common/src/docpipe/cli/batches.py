"""``docpipe batch submit | watch | cancel | results``: many documents through the batch
lane, and their results out in bulk."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn

from docpipe.cli.client import DEFAULT_PIPELINE, DocpipeClient
from docpipe.cli.common import add_api_flags, api_client, console

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batch = sub.add_parser("batch", help="batches: submit, watch, cancel, results")
    batch_sub = batch.add_subparsers(dest="batch_command", required=True)
    submit = batch_sub.add_parser("submit", help="submit a folder of .txt files or files")
    submit.add_argument("paths", nargs="+", metavar="DIR|FILE")
    submit.add_argument("--pipeline", default=DEFAULT_PIPELINE, help="a key of docpipe pipelines")
    submit.add_argument("--budget-usd", help="stop the batch once it cost this much")
    submit.add_argument("--callback-url", help="POSTed (signed) when the batch ends")
    submit.add_argument("--watch", action="store_true")
    submit.set_defaults(handler=cmd_batch_submit)
    watch = batch_sub.add_parser("watch", help="progress bars per run status, cost, ETA")
    watch.add_argument("batch_id")
    watch.set_defaults(handler=cmd_batch_watch)
    cancel = batch_sub.add_parser("cancel", help="stop every step that has not started")
    cancel.add_argument("batch_id")
    cancel.set_defaults(handler=cmd_batch_cancel)
    results = batch_sub.add_parser(
        "results", help="every run's results as JSON lines or CSV (resumes if cut off)"
    )
    results.add_argument("batch_id")
    results.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    results.add_argument("-o", "--output", metavar="FILE", help="default: standard output")
    results.add_argument(
        "--status", help="only these (comma-separated): succeeded, failed, needs_review, "
        "cancelled, pending, or run statuses",
    )  # fmt: skip
    results.set_defaults(handler=cmd_batch_results)
    for parser in (submit, watch, cancel, results):
        add_api_flags(parser)


def _batch_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        files += sorted(path.glob("*.txt")) if path.is_dir() else [path]
    return files


def cmd_batch_submit(args: argparse.Namespace) -> int:
    files = _batch_files(args.paths)
    if not files:
        console.print("[red]no .txt files to submit[/red]")
        return 2
    documents = [{"id": f.stem, "text": f.read_text(encoding="utf-8")} for f in files]
    options: dict[str, Any] = {"pipeline": args.pipeline}
    if args.budget_usd:
        options["budget_usd"] = args.budget_usd
    if args.callback_url:
        options["callback_url"] = args.callback_url
    with api_client(args, timeout_s=300) as client:
        accepted = client.submit_batch(documents, **options)
        console.print(f"batch {accepted['batch_id']}: {accepted['runs_total']} documents")
        if args.watch:
            return _watch_batch(client, accepted["batch_id"])
    return 0


def cmd_batch_watch(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        return _watch_batch(client, args.batch_id)


def cmd_batch_cancel(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        status = client.cancel_batch(args.batch_id)
    console.print(f"batch {args.batch_id}: {status['status']} {status['runs_by_status']}")
    return 0


def cmd_batch_results(args: argparse.Namespace) -> int:
    # A download takes as long as the batch is big; each read still has the usual timeout.
    with api_client(args) as client:
        if args.output is None:
            runs = client.save_batch_results(args.batch_id, sys.stdout.buffer,
                                             format=args.format, status=args.status)  # fmt: skip
        else:
            with Path(args.output).open("wb") as out:
                runs = client.save_batch_results(args.batch_id, out, format=args.format,
                                                 status=args.status)  # fmt: skip
    # The results alone on stdout (for pipes); the note on stderr.
    where = f" written to {args.output}" if args.output else ""
    print(f"batch {args.batch_id}: {runs} runs{where}", file=sys.stderr)
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
    console.print(f"batch {batch_id} {status['status']}: {status['runs_by_status']}, "
                  f"${status['cost_so_far_usd']:.6f}")  # fmt: skip
    return 0 if status["status"] == "done" else 1
