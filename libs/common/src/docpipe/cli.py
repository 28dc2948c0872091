"""The ``docpipe`` command: migrate, run the local stack, submit and watch documents."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from docpipe.client import ApiError, DocpipeClient

if TYPE_CHECKING:
    from docpipe.db import Database

__all__ = ["main"]

# A pipe or CI log gets a fixed width instead of rich's 80 columns.
console = Console(width=None if sys.stdout.isatty() else 130)
ENDED = {"done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded"}
DEFAULT_API = os.environ.get("DOCPIPE_API_URL", "http://127.0.0.1:8000")


def cmd_migrate(args: argparse.Namespace) -> int:
    from docpipe.migrate import apply_migrations
    from docpipe.settings import get_settings

    applied = apply_migrations(get_settings().database_url)
    console.print(f"applied: {', '.join(applied)}" if applied else "schema is up to date")
    return 0


def cmd_samples(args: argparse.Namespace) -> int:
    from docpipe.samples import write_samples

    paths = write_samples(Path(args.directory), args.count, args.seed, with_dummy=args.with_dummy)
    for path in paths:
        console.print(str(path))
    return 0


def _stack_options(args: argparse.Namespace) -> Any:
    from docpipe.stack import StackOptions

    return StackOptions(
        state_dir=Path(args.state_dir),
        api_port=args.api_port,
        interactive_concurrency=args.interactive_concurrency,
        batch_concurrency=args.batch_concurrency,
        fake_latency_ms=args.latency_ms,
        fake_rpm=args.rpm,
    )


def cmd_stack_up(args: argparse.Namespace) -> int:
    from docpipe.stack import LocalStack

    stack = LocalStack(_stack_options(args))
    with console.status("starting PostgreSQL, Redis, the fake provider, API, workers, beat"):
        stack.up()
    console.print(f"docpipe is up: API {stack.api_url} (OpenAPI at {stack.api_url}/docs)")
    if stack.api_key:
        console.print(f"  API key (tenant 'default', revoked on exit): {stack.api_key}")
        console.print("  e.g. export DOCPIPE_API_KEY=<key> for docpipe submit/watch/status")
    for proc in stack.processes:
        console.print(f"  {proc.name:20} pid {proc.pid:<7} log {proc.log_path}")
    console.print("Ctrl-C stops everything.")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        while not (dead := stack.dead_processes()):
            time.sleep(0.5)
        console.print(f"[red]{dead[0].name} exited[/red]; stopping the stack")
        return 1
    except KeyboardInterrupt:
        console.print("stopping...")
        return 0
    finally:
        stack.down()


def _submit(client: DocpipeClient, files: Sequence[Path], lane: str) -> list[tuple[str, str]]:
    """Upload each file as a document named after it and start a run; (document, run_id)."""
    started = []
    for path in files:
        doc_id = path.stem
        client.put_document(doc_id, path.read_text(encoding="utf-8"))
        run = client.extract(doc_id, idempotency_key=f"cli:{doc_id}:{lane}", lane=lane)
        started.append((doc_id, run["run_id"]))
    return started


def cmd_submit(args: argparse.Namespace) -> int:
    with DocpipeClient(args.api, api_key=args.api_key) as client:
        started = _submit(client, [Path(f) for f in args.files], args.lane)
        for doc_id, run_id in started:
            console.print(f"{run_id}  {doc_id}")
        if args.watch:
            return _all_done(_watch(client, started))
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    with DocpipeClient(args.api, api_key=args.api_key) as client:
        return _all_done(_watch(client, [(run_id, run_id) for run_id in args.run_ids]))


def cmd_status(args: argparse.Namespace) -> int:
    with DocpipeClient(args.api, api_key=args.api_key) as client:
        console.print_json(json.dumps(client.run(args.run_id)))
    return 0


def _all_done(final: dict[str, dict[str, Any]]) -> int:
    return 0 if all(s["status"] == "done" for s in final.values()) else 1


def _watch(client: DocpipeClient, runs: Sequence[tuple[str, str]]) -> dict[str, dict[str, Any]]:
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
            for _, run_id in runs:
                if run_id in final:
                    continue
                status = client.run(run_id)
                progress.update(
                    bars[run_id],
                    total=status["steps_total"],
                    completed=status["steps_done"],
                    status=status["status"],
                    cost=status["cost_so_far_usd"],
                )
                if status["status"] in ENDED:
                    final[run_id] = status
                    progress.stop_task(bars[run_id])
            time.sleep(0.5)
    console.print(results_table([(doc, final[run_id]) for doc, run_id in runs]))
    return final


def results_table(rows: Sequence[tuple[str, dict[str, Any]]]) -> Table:
    table = Table(title="docpipe results")
    for column in ("document", "status", "fields found", "tokens", "cost USD", "attempts", "note"):
        table.add_column(column, justify="right" if column in ("tokens", "cost USD") else "left")
    total_cost = 0.0
    for doc, status in rows:
        fields = ((status.get("result") or {}).get("extract_fields") or {}).get("fields") or {}
        tokens = sum((s["input_tokens"] or 0) + (s["output_tokens"] or 0) for s in status["steps"])
        attempts = sum(s["attempt"] for s in status["steps"])
        total_cost += status["cost_so_far_usd"]
        table.add_row(
            doc,
            status["status"],
            str(len(fields)),
            f"{tokens:,}",
            f"{status['cost_so_far_usd']:.6f}",
            str(attempts),
            (status.get("error") or "")[:60],
        )
    table.add_section()
    table.add_row("total", "", "", "", f"{total_cost:.6f}", "", "")
    return table


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
    options: dict[str, Any] = {}
    if args.budget_usd:
        options["budget_usd"] = args.budget_usd
    if args.callback_url:
        options["callback_url"] = args.callback_url
    with DocpipeClient(args.api, api_key=args.api_key, timeout_s=300) as client:
        accepted = client.submit_batch(documents, **options)
        console.print(f"batch {accepted['batch_id']}: {accepted['runs_total']} documents")
        if args.watch:
            return _watch_batch(client, accepted["batch_id"])
    return 0


def cmd_batch_watch(args: argparse.Namespace) -> int:
    with DocpipeClient(args.api, api_key=args.api_key) as client:
        return _watch_batch(client, args.batch_id)


def cmd_batch_cancel(args: argparse.Namespace) -> int:
    with DocpipeClient(args.api, api_key=args.api_key) as client:
        status = client.cancel_batch(args.batch_id)
    console.print(f"batch {args.batch_id}: {status['status']} {status['runs_by_status']}")
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


@contextmanager
def _database() -> Iterator[Database]:
    """The database of DOCPIPE_DATABASE_URL (API keys are managed there directly)."""
    from docpipe.db import Database
    from docpipe.settings import get_settings

    db = Database(get_settings().database_url, max_size=1)
    try:
        yield db
    finally:
        db.close()


def cmd_api_key_create(args: argparse.Namespace) -> int:
    from docpipe.errors import InvalidRequestError
    from docpipe.tenants import create_api_key

    try:
        with _database() as db:
            created = create_api_key(db, args.tenant, args.name)
    except InvalidRequestError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    # The key alone on stdout (for $(docpipe api-key create ...)); the note on stderr.
    Console(stderr=True).print(
        f"API key {created.key.id} for tenant {created.key.tenant_id!r}; it is shown only "
        "now, store it (e.g. as DOCPIPE_API_KEY):"
    )
    print(created.plaintext)
    return 0


def cmd_api_key_list(args: argparse.Namespace) -> int:
    from docpipe.tenants import list_api_keys

    with _database() as db:
        keys = list_api_keys(db, args.tenant)
    table = Table(title="API keys")
    for column in ("id", "tenant", "name", "created", "last used", "revoked"):
        table.add_column(column)

    def when(moment: datetime | None) -> str:
        return moment.strftime("%Y-%m-%d %H:%M") if moment else ""

    for key in keys:
        table.add_row(key.id, key.tenant_id, key.name, when(key.created_at),
                      when(key.last_used_at), when(key.revoked_at))  # fmt: skip
    console.print(table)
    return 0


def cmd_api_key_revoke(args: argparse.Namespace) -> int:
    from docpipe.tenants import revoke_api_key

    with _database() as db:
        revoked = revoke_api_key(db, args.key_id)
    if revoked is None:
        console.print(f"[red]no active API key {args.key_id!r}[/red] (unknown or revoked already)")
        return 1
    console.print(f"revoked API key {revoked.id} of tenant {revoked.tenant_id!r}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job end to end: stack up, the sample contracts, progress, results, stop."""
    from docpipe.samples import write_samples
    from docpipe.stack import LocalStack

    stack = LocalStack(_stack_options(args))
    with console.status(
        "starting the local stack (PostgreSQL, Redis, fake provider, API, workers, beat)"
    ):
        stack.up()
    try:
        files = write_samples(Path(args.state_dir) / "samples", args.count, with_dummy=True)
        console.print(
            f"submitting {len(files)} documents to {stack.api_url} "
            "(the empty one shows a permanent failure)"
        )
        with DocpipeClient(stack.api_url, api_key=stack.api_key) as client:
            started = _submit(client, files, "interactive")
            final = _watch(client, started)
    finally:
        with console.status("stopping the stack"):
            stack.down()
    # The empty dummy document must fail (permanently, at step 1); every contract must finish.
    wrong = [
        doc
        for doc, run_id in started
        if final[run_id]["status"] != ("failed" if doc.startswith("00-dummy") else "done")
    ]
    if wrong:
        console.print(f"[red]unexpected outcome for: {', '.join(wrong)}[/red]")
    return 1 if wrong else 0


def _api_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api", default=DEFAULT_API, help="the API's URL (env DOCPIPE_API_URL)")
    p.add_argument("--api-key", default=os.environ.get("DOCPIPE_API_KEY"),
                   help="a tenant's API key (env DOCPIPE_API_KEY)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docpipe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", help="apply database migrations (idempotent, concurrency-safe)")

    samples = sub.add_parser("samples", help="write the generated sample contracts to a folder")
    samples.add_argument("directory")
    samples.add_argument("--count", type=int, default=8)
    samples.add_argument("--seed", type=int, default=0)
    samples.add_argument("--with-dummy", action="store_true", help="also the empty document")

    def stack_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--state-dir", default=".local/stack")
        p.add_argument("--api-port", type=int, default=8000)
        p.add_argument("--interactive-concurrency", type=int, default=4)
        p.add_argument("--batch-concurrency", type=int, default=4)
        p.add_argument("--latency-ms", default="200:800", help="fake provider latency lo:hi")
        p.add_argument("--rpm", type=int, default=0, help="fake provider requests/min (0: off)")

    stack = sub.add_parser("stack", help="the local stack")
    stack_sub = stack.add_subparsers(dest="stack_command", required=True)
    stack_flags(stack_sub.add_parser("up", help="start everything; Ctrl-C stops all"))

    demo = sub.add_parser("demo", help="stack up, process the sample contracts, stop (make run)")
    stack_flags(demo)
    demo.add_argument("--count", type=int, default=8)

    submit = sub.add_parser("submit", help="upload files and start a run for each")
    submit.add_argument("files", nargs="+")
    _api_flags(submit)
    submit.add_argument("--lane", choices=["interactive", "batch"], default="interactive")
    submit.add_argument("--watch", action="store_true")

    watch = sub.add_parser("watch", help="live progress bars of runs")
    watch.add_argument("run_ids", nargs="+")
    _api_flags(watch)

    batch = sub.add_parser("batch", help="batches: submit, watch, cancel")
    batch_sub = batch.add_subparsers(dest="batch_command", required=True)
    batch_submit = batch_sub.add_parser("submit", help="submit a folder of .txt files or files")
    batch_submit.add_argument("paths", nargs="+", metavar="DIR|FILE")
    batch_submit.add_argument("--budget-usd", help="stop the batch once it cost this much")
    batch_submit.add_argument("--callback-url", help="POSTed (signed) when the batch ends")
    batch_submit.add_argument("--watch", action="store_true")
    batch_watch = batch_sub.add_parser("watch", help="progress bars per run status, cost, ETA")
    batch_watch.add_argument("batch_id")
    batch_cancel = batch_sub.add_parser("cancel", help="stop every step that has not started")
    batch_cancel.add_argument("batch_id")
    for p in (batch_submit, batch_watch, batch_cancel):
        _api_flags(p)

    api_key = sub.add_parser("api-key", help="tenants' API keys: create, list, revoke")
    api_key_sub = api_key.add_subparsers(dest="api_key_command", required=True)
    key_create = api_key_sub.add_parser("create", help="a new key for a tenant (shown once)")
    key_create.add_argument("tenant")
    key_create.add_argument("--name", default="", help="what the key is for")
    key_list = api_key_sub.add_parser("list", help="every key (never the secrets)")
    key_list.add_argument("--tenant", help="only this tenant's keys")
    key_revoke = api_key_sub.add_parser("revoke", help="revoke a key at once")
    key_revoke.add_argument("key_id", help="the <id> of dp_<id>_<secret>")

    status = sub.add_parser("status", help="a run's status as JSON")
    status.add_argument("run_id")
    _api_flags(status)
    return parser


COMMANDS = {
    "migrate": cmd_migrate,
    "samples": cmd_samples,
    "demo": cmd_demo,
    "submit": cmd_submit,
    "watch": cmd_watch,
    "status": cmd_status,
}


API_KEY_COMMANDS = {
    "create": cmd_api_key_create,
    "list": cmd_api_key_list,
    "revoke": cmd_api_key_revoke,
}


BATCH_COMMANDS = {
    "submit": cmd_batch_submit,
    "watch": cmd_batch_watch,
    "cancel": cmd_batch_cancel,
}


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("DOCPIPE_LOG_LEVEL", "WARNING"))
    args = build_parser().parse_args(argv)
    if args.command == "stack":
        handler = cmd_stack_up
    elif args.command == "batch":
        handler = BATCH_COMMANDS[args.batch_command]
    elif args.command == "api-key":
        handler = API_KEY_COMMANDS[args.api_key_command]
    else:
        handler = COMMANDS[args.command]
    try:
        return handler(args)
    except ApiError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
