"""A number has one home and a reference has a target: every figure the README and the docs
quote is the one its benchmark report holds (bench.figures), and every pointer to a section
of the README or of a docs page names a heading that exists."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from bench import figures

ROOT = Path(__file__).resolve().parents[2]

# How the code and the docs point at a section in prose: the file (README, or a Markdown
# file's path) then a comma, "'s" or a colon, then the heading in double quotes.
_PROSE_REFERENCE = re.compile(
    r"(?P<file>README|(?:[\w.-]+/)*[\w.-]+\.md)(?:,|'s|:)\s+\"(?P<heading>[^\"\n]+)\""
)
# Markdown links with an anchor, outside the docs site (mkdocs checks those inside it).
_LINK_WITH_ANCHOR = re.compile(r"\]\((?P<file>[^)\s#]*\.md)#(?P<anchor>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$", re.MULTILINE)
_TEXT_FILES = ("*.py", "*.md", "*.yaml", "*.yml", "*.toml", "*.tpl", "*.txt", "Makefile", "*.sh")


def _tracked(*patterns: str) -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", *patterns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def _headings(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {m["title"].strip() for m in _HEADING.finditer(text)}


def _target(name: str, source: Path) -> Path | None:
    """The Markdown file a reference names: README is the repository's; a path is tried
    from the repository's root, from docs/ and from the referring file's folder."""
    if name == "README":
        return ROOT / "README.md"
    for base in (ROOT, ROOT / "docs", source.parent):
        if (candidate := (base / name).resolve()).is_file():
            return candidate
    return None


def test_every_quoted_figure_is_the_one_its_report_holds() -> None:
    quoted = list(figures.quotes())
    assert len(quoted) >= 10, "the README and the docs quote their figures through bench.figures"
    stale = []
    for quote in quoted:
        where = f"{quote.file.relative_to(ROOT)}:{quote.line}"
        try:
            if not quote.current:
                stale.append(f"{where}: says {quote.text.strip()!r}, the report {quote.expected!r}")
        except figures.UnknownFigure as error:
            stale.append(f"{where}: {error}")
    assert not stale, "run `python -m bench.figures`:\n" + "\n".join(stale)


# A marker, not its syntax shown in a code span.
_MARKER = re.compile(r"(?<!`)<!-- figure ")


def test_every_figure_marker_is_read_as_a_quote() -> None:
    """A marker the reader misses (its template on the next line, say) is never checked."""
    reports = ROOT / "docs" / "benchmarks"
    markers = Counter(
        {
            path: count
            for path in _tracked("*.md")
            if reports not in path.parents
            and (count := len(_MARKER.findall(path.read_text(encoding="utf-8"))))
        }
    )
    assert Counter(quote.file for quote in figures.quotes()) == markers


def test_a_figure_template_naming_an_unknown_figure_is_refused() -> None:
    with pytest.raises(figures.UnknownFigure, match=r"no figure 'docpipe\.nothing'"):
        figures.render("crash-cost", "{docpipe.nothing|.1f}")
    with pytest.raises(figures.UnknownFigure, match="no report"):
        figures.render("no-such-report", "{x}")
    assert figures.render("crash-cost", "{docpipe.clean_calls|.0f} calls") == "14 calls"


def test_every_reference_to_a_section_names_a_heading_that_exists() -> None:
    broken = []
    for source in _tracked(*_TEXT_FILES):
        text = source.read_text(encoding="utf-8", errors="replace")
        for match in _PROSE_REFERENCE.finditer(text):
            target = _target(match["file"], source)
            where = f"{source.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
            if target is None:
                broken.append(f"{where}: no file {match['file']}")
            elif match["heading"] not in _headings(target):
                broken.append(f"{where}: {match['file']} has no heading {match['heading']!r}")
    assert not broken, "\n".join(broken)


def test_every_anchor_link_outside_the_site_names_a_heading_that_exists() -> None:
    broken = []
    for source in _tracked("*.md"):
        if (ROOT / "docs") in source.parents:
            continue  # mkdocs --strict checks the site's own anchors
        text = source.read_text(encoding="utf-8")
        for match in _LINK_WITH_ANCHOR.finditer(text):
            target = (source.parent / match["file"]).resolve()
            slugs = {slugify(h, "-") for h in _headings(target)} if target.is_file() else set()
            if match["anchor"] not in slugs:
                where = f"{source.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
                broken.append(f"{where}: {match['file']}#{match['anchor']}")
    assert not broken, "\n".join(broken)
