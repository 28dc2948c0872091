"""constraints.txt pins every distribution the venv holds, at the version installed: a new
dependency (direct or not) that nobody pinned fails here, not on a machine that resolves it
to another version later. ``make constraints`` regenerates the file."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

CONSTRAINTS = Path(__file__).resolve().parents[2] / "constraints.txt"
# What `pip freeze` leaves out of its list, and docpipe's own (editable) packages.
UNPINNED = {"pip", "setuptools", "wheel", "distribute"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[canonical(name)] = version.strip()
    return pins


def installed() -> dict[str, str]:
    found = {}
    for dist in metadata.distributions():
        name = canonical(dist.metadata["Name"])
        if name not in UNPINNED and not name.startswith("docpipe"):
            found[name] = dist.version
    return found


def test_every_installed_distribution_is_pinned_at_its_version() -> None:
    pins, present = pinned(), installed()
    unpinned = sorted(f"{n}=={v}" for n, v in present.items() if n not in pins)
    assert not unpinned, f"installed but not in constraints.txt (make constraints): {unpinned}"
    other = sorted(
        f"{n}: {v} installed, {pins[n]} pinned" for n, v in present.items() if pins[n] != v
    )
    assert not other, other


def test_rich_and_the_dev_tools_are_pinned() -> None:
    """The runtime dependency the issue found missing, and every tool requirements-dev.txt
    names."""
    pins = pinned()
    tools = [
        canonical(line.split("#", 1)[0].strip())
        for line in (CONSTRAINTS.parent / "requirements-dev.txt").read_text().splitlines()
        if line.split("#", 1)[0].strip()
    ]
    assert tools, "requirements-dev.txt names the dev tools"
    assert [t for t in [*tools, "rich"] if t not in pins] == []
