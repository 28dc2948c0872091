"""What every docpipe command shares: the console, how tables are shown, and the API
connection flags."""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from docpipe.cli.client import DocpipeClient

__all__ = ["DEFAULT_API_URL", "add_api_flags", "age", "api_client", "console", "errors", "show"]

DEFAULT_API_URL = "http://127.0.0.1:8000"  # where `docpipe stack up` serves it

# A pipe or CI log gets a fixed width instead of rich's 80 columns (the results table's
# notes fit on one line), unless COLUMNS says otherwise.
console = Console(width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS") or 160))
# What went wrong, apart from what a command prints for scripts to read (run ids, tables);
# a line each, never wrapped, so a file's name and its reason stay together for grep.
errors = Console(stderr=True, soft_wrap=True)


def show(renderable: RenderableType) -> None:
    """Print ``renderable``; a table drawn on a terminal, elsewhere (a pipe, a file, a CI
    log) as tab-separated lines, its title after "# " and its header first, with nothing
    cut: a cell's lines are joined by " / "."""
    if not isinstance(renderable, Table) or console.is_terminal:
        console.print(renderable)
        return
    # Straight to the file: rich would expand the tabs into spaces.
    lines = [f"# {_plain(renderable.title)}"] if renderable.title else []
    columns = [[column.header, *column.cells] for column in renderable.columns]
    lines += ["\t".join(_plain(cell) for cell in row) for row in zip(*columns, strict=True)]
    console.file.write("".join(f"{line}\n" for line in lines))


def _plain(cell: RenderableType) -> str:
    text = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
    return " / ".join(line.strip() for line in text.replace("\t", " ").splitlines())


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


def age(seconds: float) -> str:
    """How long, as a column of ages shows it: 45s, 12m, 3.5h, 2.0d."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"
