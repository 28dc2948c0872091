"""Figures quoted in the README and the docs, rendered from the benchmark reports.

A number has one home: the report that measured it (``docs/benchmarks/<name>.json``, its
``figures``). Prose that quotes one marks the place with the report's name and a template,
and the text after the mark is what the template gives::

    <!-- figure crash-cost: docpipe re-pays {docpipe.wasted_calls|.0f} of 14 -->docpipe
    re-pays 4 of 14<!-- /figure -->

A placeholder is ``{path|format}``: ``path`` walks the report's figures by key (keys may
hold dots, spaces and ``@``: the longest key that fits is taken at each level), ``format``
is a Python format spec (``.1f``, ``,.0f``, ``.0%``; none prints the value as it is).
The template and the text may be wrapped over lines as Markdown allows: whitespace is
compared as one space.

    python -m bench.figures          # rewrite every marked place from the reports
    python -m bench.figures --check  # list the places that differ (tests/docs does the same)

A report rerun changes its JSON; ``python -m bench.figures`` then carries the new numbers to
every page that quotes them, and the docs test fails until it has. The capacity model's worked
examples (docs/capacity.md) quote the reports through the command's output, so they are
printed again too.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from bench.capacity import rewrite_worked_examples
from bench.harness import REPORTS, ROOT

__all__ = ["Quote", "UnknownFigure", "quotes", "render", "rewrite"]

_QUOTE = re.compile(
    r"<!-- figure (?P<report>[\w-]+):\s+(?P<template>.*?)\s+-->(?P<text>.*?)<!-- /figure -->",
    re.DOTALL,
)
_PLACEHOLDER = re.compile(r"\{(?P<path>[^{}|]+)(?:\|(?P<spec>[^{}]*))?\}")
# The page whose worked examples print the reports' figures through bench.capacity.
CAPACITY = ROOT / "docs" / "capacity.md"


class UnknownFigure(LookupError):
    """A template names a report or a figure that does not exist."""


@dataclass(frozen=True)
class Quote:
    """One marked place: where it is, what it says, and what the report says it should."""

    file: Path
    line: int
    report: str
    template: str
    text: str

    @property
    def expected(self) -> str:
        return render(self.report, self.template)

    @property
    def current(self) -> bool:
        return _spaces(self.text) == _spaces(self.expected)


def _spaces(text: str) -> str:
    return " ".join(text.split())


@cache
def _figures(report: str) -> Mapping[str, Any]:
    path = REPORTS / f"{report}.json"
    if not path.is_file():
        raise UnknownFigure(f"no report {path.relative_to(ROOT)}")
    data = json.loads(path.read_text(encoding="utf-8"))
    figures = data.get("figures", data)
    if not isinstance(figures, dict):
        raise UnknownFigure(f"{report}.json has no figures object")
    return figures


def _walk(node: Any, path: str) -> Any:
    if isinstance(node, dict):
        if path in node:
            return node[path]
        # The longest key that is a prefix of the path (keys such as "docs_per_s@0.2s" hold dots).
        for key in sorted(node, key=len, reverse=True):
            if path.startswith(f"{key}."):
                return _walk(node[key], path[len(key) + 1 :])
    raise KeyError(path)


def render(report: str, template: str) -> str:
    """The template with each placeholder replaced by the report's figure, formatted."""

    def value(match: re.Match[str]) -> str:
        path = match["path"].strip()
        try:
            figure = _walk(_figures(report), path)
        except KeyError:
            raise UnknownFigure(f"{report}.json has no figure {path!r}") from None
        return format(figure, match["spec"] or "")

    return _PLACEHOLDER.sub(value, _spaces(template))


def _documents() -> Iterator[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in listed:
        path = ROOT / name
        # The reports themselves are written by the benchmarks, not quoted from them.
        if path.is_file() and REPORTS not in path.parents:
            yield path


def quotes() -> Iterator[Quote]:
    """Every marked place in the repository's Markdown, outside the reports."""
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        for match in _QUOTE.finditer(text):
            yield Quote(
                file=path,
                line=text.count("\n", 0, match.start()) + 1,
                report=match["report"],
                template=match["template"],
                text=match["text"],
            )


def rewrite(path: Path) -> bool:
    """Render every marked place of one file again; True when the file changed."""
    text = path.read_text(encoding="utf-8")

    def again(match: re.Match[str]) -> str:
        rendered = render(match["report"], match["template"])
        if _spaces(match["text"]) == _spaces(rendered):
            return match.group(0)  # keep the author's line breaks
        return f"<!-- figure {match['report']}: {match['template']} -->{rendered}<!-- /figure -->"

    updated = _QUOTE.sub(again, text)
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list what differs, change nothing")
    args = parser.parse_args()
    if args.check:
        stale = 0
        for q in quotes():
            where = f"{q.file.relative_to(ROOT)}:{q.line}"
            try:
                if not q.current:
                    print(f"{where}: {_spaces(q.text)!r} -> {q.expected!r}")
                    stale += 1
            except UnknownFigure as error:
                print(f"{where}: {error}")
                stale += 1
        if rewrite_worked_examples(CAPACITY, write=False):
            print(f"{CAPACITY.relative_to(ROOT)}: a worked example prints otherwise")
            stale += 1
        sys.exit(1 if stale else 0)
    for path in sorted({q.file for q in quotes()}):
        if rewrite(path):
            print(f"rewrote {path.relative_to(ROOT)}")
    if rewrite_worked_examples(CAPACITY):
        print(f"rewrote {CAPACITY.relative_to(ROOT)}'s worked examples")


if __name__ == "__main__":
    main()
