"""The ``docpipe`` command: migrate, submit and watch documents and batches, manage API keys
and the tenant's webhook signing secret, list and validate pipelines.
Each command group lives in its own module; installed packages add groups through the
``docpipe.cli`` entry point (docpipe-dev adds ``stack up``, ``demo`` and ``samples``)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from importlib.metadata import entry_points

from docpipe.cli import batches, database, pipelines, reviews, runs, webhooks
from docpipe.cli.client import ApiError
from docpipe.cli.common import console

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docpipe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (database, runs, batches, reviews, pipelines, webhooks):
        group.register(sub)
    for plugin in entry_points(group="docpipe.cli"):
        plugin.load().register(sub)
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
