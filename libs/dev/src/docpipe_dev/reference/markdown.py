"""Markdown tables and cells for the generated pages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["REPO", "cell", "code", "table"]

# The repository root: the generators read the chart and the docs from it.
REPO = Path(__file__).resolve().parents[5]


def cell(text: object) -> str:
    """Text that stays in its table cell: pipes escaped, lines joined, and ``<`` outside
    code spans escaped (``dp_<id>_<secret>`` is text, not an HTML tag)."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    parts[::2] = [part.replace("<", "&lt;") for part in parts[::2]]
    return "`".join(parts)


def code(text: object) -> str:
    """Inline code that stays in its table cell."""
    value = " ".join(str(text).split()).replace("|", "\\|")
    return f"`{value}`" if value else ""


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
