"""What every docpipe command shares: the console and the API connection flags."""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console

from docpipe.cli.client import DocpipeClient

__all__ = ["add_api_flags", "api_client", "console", "errors"]

# A pipe or CI log gets a fixed width instead of rich's 80 columns (the results table's
# notes fit on one line).
console = Console(width=None if sys.stdout.isatty() else 160)
# What went wrong, apart from what a command prints for scripts to read (run ids, tables);
# a line each, never wrapped, so a file's name and its reason stay together for grep.
errors = Console(stderr=True, soft_wrap=True)


def add_api_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api",
        default=os.environ.get("DOCPIPE_API_URL", "http://127.0.0.1:8000"),
        help="the API's URL (env DOCPIPE_API_URL)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("DOCPIPE_API_KEY"),
        help="a tenant's API key (env DOCPIPE_API_KEY)",
    )


def api_client(args: argparse.Namespace, timeout_s: float = 30) -> DocpipeClient:
    return DocpipeClient(args.api, api_key=args.api_key, timeout_s=timeout_s)
