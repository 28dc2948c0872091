"""``docpipe samples | stack up|status|down | demo``: the local stack and the sample contracts
(added to the ``docpipe`` command through the ``docpipe.cli`` entry point)."""

from __future__ import annotations

import argparse
from pathlib import Path

from docpipe.cli.client import DocpipeClient
from docpipe.cli.common import console
from docpipe.cli.runs import submit_files, watch_runs
from docpipe.cli.uploads import document_id_of
from docpipe_dev import stack_commands
from docpipe_dev.stack_commands import add_stack_flags, stack_options, start_stack

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    samples = sub.add_parser(
        "samples",
        help="write generated sample contracts to a folder, to try docpipe on",
        description="Writes made-up commercial contracts (each different, with sections, "
        "parties, dates and amounts) to DIRECTORY, as text or in other formats.",
    )
    samples.add_argument(
        "directory", metavar="DIRECTORY", help="where to write them (made if missing)"
    )
    samples.add_argument(
        "--count",
        type=int,
        default=8,
        metavar="N",
        help="how many contracts (default: %(default)s)",
    )
    samples.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="another seed writes other contracts (default: %(default)s)",
    )
    samples.add_argument(
        "--with-dummy",
        action="store_true",
        help="also write 00-dummy-empty.txt, an empty document whose run fails on purpose",
    )
    samples.add_argument(
        "--formats",
        default="text",
        metavar="LIST",
        help="comma-separated: text, pdf, docx, scan (a scanned PDF without a text layer, "
        "read by OCR), photo (a phone's JPEG of the first page), tiff (a scanner's two-page "
        "TIFF) (default: %(default)s)",
    )
    samples.add_argument(
        "--expected",
        metavar="FILE",
        help="also write FILE: an evaluation set of the text contracts, one JSON line each "
        "with its text and the fields it states (docpipe eval set upload NAME FILE "
        "--source samples)",
    )
    samples.set_defaults(handler=cmd_samples)

    stack_commands.register(sub)

    demo = sub.add_parser(
        "demo",
        help="what make run does: the stack up, sample contracts through it, results, stop",
        description="Starts the stack, sends the sample contracts (as text, PDF, Word and a "
        "scan) and two NDAs through it, shows their progress and the results table, and "
        "stops the stack. Exit code 1 when a run ends other than expected.",
    )
    add_stack_flags(demo)
    demo.add_argument(
        "--count",
        type=int,
        default=8,
        metavar="N",
        help="how many sample contracts (default: %(default)s)",
    )
    demo.set_defaults(handler=cmd_demo)


def cmd_samples(args: argparse.Namespace) -> int:
    from docpipe_dev.sample_files import FORMATS
    from docpipe_dev.samples import write_samples

    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if unknown := [f for f in formats if f not in FORMATS]:
        console.print(f"[red]unknown format {unknown[0]!r} (known: {', '.join(FORMATS)})[/red]")
        return 2
    paths = write_samples(
        Path(args.directory), args.count, args.seed, with_dummy=args.with_dummy, formats=formats
    )
    for path in paths:
        console.print(str(path))
    if args.expected:
        from docpipe_dev.samples import write_expected

        console.print(str(write_expected(Path(args.expected), args.count, args.seed)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job end to end: stack up, the sample contracts through document_extract:v1
    and sample NDAs through nda_review:v1 (a pipeline shipped as a file), progress, results,
    stop."""
    from docpipe_dev.sample_files import write_contract
    from docpipe_dev.sample_ndas import write_ndas
    from docpipe_dev.samples import sample_contracts, write_samples
    from docpipe_dev.stack import LocalStack

    stack = LocalStack(stack_options(args))
    start_stack(stack, "starting the local stack: PostgreSQL, Redis, fake provider, API, workers")
    try:
        folder = stack.options.state_dir / "samples"
        contracts = write_samples(folder, args.count, with_dummy=True)
        # The first contract once more as a PDF, a Word file and a scan: one of each format.
        first = sample_contracts(1)[0]
        contracts += [
            write_contract(folder, first.slug, first.text, fmt) for fmt in ("pdf", "docx", "scan")
        ]
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
