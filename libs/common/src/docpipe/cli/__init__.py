"""The ``docpipe`` command: migrate, run the local stack, submit and watch documents and
batches, manage API keys. Each command group lives in its own module."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence

from docpipe.cli import batches, keys, local, runs
from docpipe.cli.common import console
from docpipe.client import ApiError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docpipe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (local, runs, batches, keys):
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("DOCPIPE_LOG_LEVEL", "WARNING"))
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except ApiError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    return code
