"""``docpipe samples | stack up | demo``: the local stack and the sample contracts (added
to the ``docpipe`` command through the ``docpipe.cli`` entry point)."""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from docpipe.cli.client import DocpipeClient
from docpipe.cli.common import console
from docpipe.cli.runs import submit_files, watch_runs
from docpipe.cli.uploads import document_id_of

if TYPE_CHECKING:
    from docpipe_dev.stack import LocalStack, StackOptions

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    samples = sub.add_parser(
        "samples",
        help="write generated sample contracts to a folder, to try docpipe on",
        description="Writes made-up commercial contracts (each different, with sections, "
        "parties, dates and amounts) to DIRECTORY, as text or in other formats.",
    )
    samples.add_argument("directory", metavar="DIRECTORY",
                         help="where to write them (made if missing)")  # fmt: skip
    samples.add_argument("--count", type=int, default=8, metavar="N",
                         help="how many contracts (default: %(default)s)")  # fmt: skip
    samples.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="another seed writes other contracts (default: %(default)s)",
    )
    samples.add_argument("--with-dummy", action="store_true",
                         help="also write 00-dummy-empty.txt, an empty document whose run "
                         "fails on purpose")  # fmt: skip
    samples.add_argument(
        "--formats",
        default="text",
        metavar="LIST",
        help="comma-separated: text, pdf, docx, scan (a scanned PDF without a text layer, "
        "read by OCR) (default: %(default)s)",
    )
    samples.set_defaults(handler=cmd_samples)

    stack = sub.add_parser("stack", help="the whole docpipe stack on this machine, for "
                           "development and trying it out")  # fmt: skip
    stack_sub = stack.add_subparsers(dest="stack_command", required=True, metavar="COMMAND")
    up = stack_sub.add_parser(
        "up",
        help="start everything and keep it running; Ctrl-C stops it",
        description="Starts PostgreSQL and Redis (from this machine's binaries, unless "
        "DOCPIPE_DATABASE_URL and DOCPIPE_REDIS_URL name servers), the fake LLM provider, "
        "the API, both worker pools and beat; prints the API's URL and a session API key "
        "(revoked when the stack stops). Ctrl-C stops everything.",
    )
    _stack_flags(up)
    up.set_defaults(handler=cmd_stack_up)

    demo = sub.add_parser(
        "demo",
        help="what make run does: the stack up, sample contracts through it, results, stop",
        description="Starts the stack, sends the sample contracts (as text, PDF, Word and a "
        "scan) and two NDAs through it, shows their progress and the results table, and "
        "stops the stack. Exit code 1 when a run ends other than expected.",
    )
    _stack_flags(demo)
    demo.add_argument("--count", type=int, default=8, metavar="N",
                      help="how many sample contracts (default: %(default)s)")  # fmt: skip
    demo.set_defaults(handler=cmd_demo)


def _stack_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", default=".local/stack", metavar="DIR",
                        help="where the stack keeps its databases and logs "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("--api-port", type=int, default=8000, metavar="PORT",
                        help="the API's port (default: %(default)s)")  # fmt: skip
    parser.add_argument(
        "--interactive-concurrency",
        type=int,
        default=4,
        metavar="N",
        help="processes of the interactive worker pool (default: %(default)s)",
    )
    parser.add_argument(
        "--batch-concurrency",
        type=int,
        default=4,
        metavar="N",
        help="processes of the batch worker pool (default: %(default)s)",
    )
    parser.add_argument("--latency-ms", default="200:800", metavar="LO:HI",
                        help="the fake provider's answer time, milliseconds, drawn between "
                        "LO and HI (default: %(default)s)")  # fmt: skip
    parser.add_argument("--rpm", type=int, default=0, metavar="N",
                        help="the fake provider's rate limit, requests per minute, answered "
                        "with 429 beyond it; 0: none (default: %(default)s)")  # fmt: skip


def cmd_samples(args: argparse.Namespace) -> int:
    from docpipe_dev.sample_files import FORMATS
    from docpipe_dev.samples import write_samples

    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if unknown := [f for f in formats if f not in FORMATS]:
        console.print(f"[red]unknown format {unknown[0]!r} (known: {', '.join(FORMATS)})[/red]")
        return 2
    paths = write_samples(Path(args.directory), args.count, args.seed,
                          with_dummy=args.with_dummy, formats=formats)  # fmt: skip
    for path in paths:
        console.print(str(path))
    return 0


def _stack_options(args: argparse.Namespace) -> StackOptions:
    from docpipe_dev.stack import StackOptions

    return StackOptions(
        state_dir=Path(args.state_dir),
        api_port=args.api_port,
        interactive_concurrency=args.interactive_concurrency,
        batch_concurrency=args.batch_concurrency,
        fake_latency_ms=args.latency_ms,
        fake_rpm=args.rpm,
    )


def _start(stack: LocalStack, what: str) -> None:
    """Start ``stack``; a process that will not start ends the command with one line: the
    process, the last line its log has (the error, usually), and where the log is."""
    try:
        with console.status(what):
            stack.up()
    except RuntimeError as exc:
        name, _, log = str(exc).partition("\n")
        lines = [line.strip() for line in log.splitlines() if line.strip()]
        last = next(
            (line for line in reversed(lines) if "Error" in line), lines[-1] if lines else ""
        )
        logs = Path(stack.options.state_dir) / "logs"
        raise SystemExit(f"error: {name.rstrip(':')}: {last} (logs in {logs})") from None


def cmd_stack_up(args: argparse.Namespace) -> int:
    from docpipe_dev.stack import LocalStack

    stack = LocalStack(_stack_options(args))
    _start(stack, "starting PostgreSQL, Redis, the fake provider, API, workers, beat")
    console.print(f"docpipe is up: API {stack.api_url} (OpenAPI at {stack.api_url}/docs, "
                  f"web pages at {stack.api_url}/ui/)")  # fmt: skip
    if stack.api_key:
        console.print(f"  API key (tenant 'default', revoked on exit): {stack.api_key}")
        console.print("  e.g. export DOCPIPE_API_KEY=<key> for docpipe submit/watch/status, "
                      "or sign in to the web pages with it")  # fmt: skip
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


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job end to end: stack up, the sample contracts through document_extract:v1
    and sample NDAs through nda_review:v1 (a pipeline shipped as a file), progress, results,
    stop."""
    from docpipe_dev.sample_files import write_contract
    from docpipe_dev.sample_ndas import write_ndas
    from docpipe_dev.samples import sample_contracts, write_samples
    from docpipe_dev.stack import LocalStack

    stack = LocalStack(_stack_options(args))
    _start(stack, "starting the local stack (PostgreSQL, Redis, fake provider, API, workers, beat)")
    try:
        folder = Path(args.state_dir) / "samples"
        contracts = write_samples(folder, args.count, with_dummy=True)
        # The first contract once more as a PDF, a Word file and a scan: one of each format.
        first = sample_contracts(1)[0]
        contracts += [write_contract(folder, first.slug, first.text, fmt)
                      for fmt in ("pdf", "docx", "scan")]  # fmt: skip
        ndas = write_ndas(folder / "nda", count=2)
        console.print(
            f"submitting {len(contracts)} contracts and {len(ndas)} NDAs to {stack.api_url} "
            "(the empty document shows a permanent failure)"
        )
        with DocpipeClient(stack.api_url, api_key=stack.api_key) as client:
            # A PDF, Word file or scan made again differs in its bytes (dates, noise), and a
            # document's content never changes: the last demo's documents go first.
            for path in contracts + ndas:
                client.delete_document(document_id_of(path))
            started = submit_files(client, contracts, "interactive").started
            started += submit_files(client, ndas, "interactive", "nda_review:v1").started
            final = watch_runs(client, started)
    finally:
        with console.status("stopping the stack"):
            stack.down()
    # The empty dummy document must fail (permanently, at step 1); every other must finish.
    wrong = [
        doc
        for doc, run_id in started
        if final[run_id]["status"] != ("failed" if doc.startswith("00-dummy") else "done")
    ]
    if wrong:
        console.print(f"[red]unexpected outcome for: {', '.join(wrong)}[/red]")
    return 1 if wrong else 0
