"""What every docpipe command shares: the console and the API connection flags."""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console

from docpipe.cli.client import DocpipeClient

__all__ = ["DEFAULT_API_URL", "add_api_flags", "api_client", "console", "errors"]

DEFAULT_API_URL = "http://127.0.0.1:8000"  # where `docpipe stack up` serves it

# A pipe or CI log gets a fixed width instead of rich's 80 columns (the results table's
# notes fit on one line), unless COLUMNS says otherwise.
console = Console(width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS") or 160))
# What went wrong, apart from what a command prints for scripts to read (run ids, tables);
# a line each, never wrapped, so a file's name and its reason stay together for grep.
errors = Console(stderr=True, soft_wrap=True)


def add_api_flags(parser: argparse.ArgumentParser) -> None:
    # Defaults are read when the command runs, not here: help and the docs show no one's
    # environment (and never a key).
    parser.add_argument(
        "--api",
        metavar="URL",
        help=f"the docpipe API to talk to (default: $DOCPIPE_API_URL, else {DEFAULT_API_URL})",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help="your tenant's API key, dp_<id>_<secret> (default: $DOCPIPE_API_KEY)",
    )


def api_client(args: argparse.Namespace, timeout_s: float = 30) -> DocpipeClient:
    url = args.api or os.environ.get("DOCPIPE_API_URL") or DEFAULT_API_URL
    key = args.api_key or os.environ.get("DOCPIPE_API_KEY")
    return DocpipeClient(url.rstrip("/"), api_key=key, timeout_s=timeout_s)
