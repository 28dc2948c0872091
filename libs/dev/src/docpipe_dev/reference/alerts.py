"""The alerts beside their runbook: each rule of ``charts/docpipe/rules/*.yaml`` rendered
into its section of ``docs/operations/runbook.md``, and the checks that every alert has a
section saying what it means, what to look at and what to do, and a ``runbook_url``
annotation that points at that section of the published site."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from docpipe_dev.reference.markdown import REPO, code, table

__all__ = ["RUNBOOK", "Alert", "alerts", "index", "rule", "runbook_url", "undocumented"]

RUNBOOK = REPO / "docs/operations/runbook.md"
RUNBOOK_PAGE = "operations/runbook/"
# What every runbook section says, each a paragraph starting with these words.
PARTS = ("What it means.", "What to look at.", "What to do.")


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    duration: str
    severity: str
    annotations: dict[str, str]


@lru_cache(maxsize=1)
def alerts() -> dict[str, Alert]:
    found = {}
    for path in sorted((REPO / "charts/docpipe/rules").glob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for r in group["rules"]:
                if "alert" in r:
                    found[r["alert"]] = Alert(
                        r["alert"],
                        r["expr"].strip(),
                        r.get("for", "0s"),
                        r.get("labels", {}).get("severity", ""),
                        r.get("annotations", {}),
                    )
    return found


def site_url() -> str:
    config: dict[str, Any] = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    return str(config["site_url"]).rstrip("/") + "/"


def runbook_url(name: str) -> str:
    """Where the published site shows ``name``'s runbook section."""
    return f"{site_url()}{RUNBOOK_PAGE}#{name.lower()}"


def sections() -> dict[str, str]:
    """The runbook page's ``## Name`` sections by name."""
    text = RUNBOOK.read_text()
    found = re.split(r"^## (\S+)\s*$", text, flags=re.MULTILINE)
    return dict(zip(found[1::2], found[2::2], strict=True))


def undocumented() -> list[str]:
    written = sections()
    missing = []
    for name, alert in alerts().items():
        if name not in written:
            missing.append(
                f"alert {name} has no runbook section: add '## {name}' to "
                "docs/operations/runbook.md"
            )
        else:
            missing += [
                f"alert {name}'s runbook section lacks a paragraph '{part} ...'"
                for part in PARTS
                if f"**{part}**" not in written[name]
            ]
            if f"<!-- reference: alert {name} -->" not in written[name]:
                missing.append(
                    f"alert {name}'s runbook section lacks its rule: add "
                    f"<!-- reference: alert {name} --> to it"
                )
        if alert.annotations.get("runbook_url") != runbook_url(name):
            missing.append(
                f"alert {name} has no runbook_url annotation pointing at its "
                f"section: set runbook_url: {runbook_url(name)}"
            )
    missing += [
        f"runbook section {name} names no alert of charts/docpipe/rules: remove it"
        for name in written
        if name not in alerts()
    ]
    return missing


def index() -> str:
    rows = [
        [f"[{a.name}](#{a.name.lower()})", a.severity, a.annotations.get("summary", "")]
        for a in alerts().values()
    ]
    return table(["alert", "severity", "summary"], rows)


def rule(name: str) -> str:
    alert = alerts()[name]
    summary = alert.annotations.get("summary", "")
    return (
        f"Severity {code(alert.severity)}, fires after {code(alert.duration)}: "
        f"*{summary}*\n\n```promql\n{alert.expr}\n```\n"
    )
