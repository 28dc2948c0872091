"""The ``docpipe`` command. Each command group registers its parsers from its own module;
installed packages add groups through the ``docpipe.cli`` entry point (docpipe-dev adds
``stack up``, ``demo`` and ``samples``). A failure is one line on stderr with what to do
(:mod:`docpipe.cli.failures`); ``--debug`` shows the traceback instead."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from collections.abc import Sequence
from importlib.metadata import entry_points

from docpipe import __version__
from docpipe.cli import (
    batches,
    completion,
    database,
    evaluations,
    lists,
    pipelines,
    results,
    reviews,
    runs,
    webhooks,
)
from docpipe.cli.failures import ExitCode, explain
from docpipe.cli.tree import commands

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
docpipe runs multi-step LLM pipelines over documents (contracts, NDAs, your own), durably:
a crash, a deploy or a provider's rate limit delays a run, and never pays for a finished
step twice. Submit documents, watch their runs, read the values they found with the
passage each was read from."""

GETTING_STARTED = """\
getting started:
  docpipe stack up --detach             the whole stack on this machine, in the background
  docpipe stack status | down           where it is; stop it
  docpipe submit contract.pdf --watch   a run per file, its progress, then its results
  docpipe results RUN_ID                the values a run found, with their evidence

environment:
  DOCPIPE_API_URL       the API (default: http://127.0.0.1:8000, where stack up serves it)
  DOCPIPE_API_KEY       your tenant's API key
  DOCPIPE_DATABASE_URL  PostgreSQL, for migrate and api-key (default for api-key: the
                        local stack's)
  DOCPIPE_STACK_DIR     the local stack's state directory (default: .local/stack)"""


def _epilog() -> str:
    codes = "\n".join(
        textwrap.fill(
            code.meaning, 88, initial_indent=f"  {code.value}  ", subsequent_indent="     "
        )
        for code in ExitCode
    )
    return f"{GETTING_STARTED}\n\nexit codes:\n{codes}\n\n'docpipe COMMAND --help' explains each."


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree: the library's groups, then installed packages' groups; every
    command takes ``--debug``."""
    parser = argparse.ArgumentParser(
        prog="docpipe",
        description=DESCRIPTION,
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"docpipe {__version__}",
        help="print docpipe's version and exit",
    )
    parser.add_argument(
        "--debug", action="store_true", help="on a failure, show the traceback instead of one line"
    )
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for group in (
        runs,
        lists,
        results,
        batches,
        reviews,
        evaluations,
        pipelines,
        webhooks,
        database,
        completion,
    ):
        group.register(sub)
    for plugin in entry_points(group="docpipe.cli"):
        plugin.load().register(sub)
    for command in commands(parser):
        if not command.subcommands and command.parser is not parser:
            # SUPPRESS: a subcommand's default would overwrite a --debug given before it.
            command.parser.add_argument(
                "--debug",
                action="store_true",
                default=argparse.SUPPRESS,
                help="on a failure, show the traceback",
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    level = "DEBUG" if debug else os.environ.get("DOCPIPE_LOG_LEVEL", "WARNING")
    logging.basicConfig(level=level)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        failure = explain(exc)
        if failure is None:
            print(
                f"error: unexpected {type(exc).__name__}: {' '.join(str(exc).split())} "
                "(run it again with --debug for the traceback)",
                file=sys.stderr,
            )
            return ExitCode.NOT_DONE
        print(f"error: {failure.message}", file=sys.stderr)
        return failure.exit_code
    return code
