"""``docpipe runs list`` and ``docpipe batch list``: past work, newest first, a page at a
time, found by status, pipeline, batch, document name, time or review; and ``docpipe
dashboard``, the tenant's work at a glance as the web pages' home shows it."""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.table import Table

from docpipe.cli.common import add_api_flags, age, api_client, console, show
from docpipe.statuses import ACTIVE_RUN_STATUSES, ENDED_RUN_STATUSES, BatchStatus, RunStatus

__all__ = ["add_batch_list", "dashboard_lines", "register"]

_RELATIVE = re.compile(r"^(\d{1,6})([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    runs = sub.add_parser(
        "runs",
        help="past runs: list them, newest first, with filters",
        description="The tenant's runs, newest first, a page at a time.",
    )
    runs_sub = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")
    listing = runs_sub.add_parser(
        "list",
        help="runs newest first: by status, pipeline, batch, document name, time, review",
        description="Lists the tenant's runs, newest first: id, document, pipeline, status, "
        "steps, cost and age. Filters combine. A page ends with the command that shows the "
        "next one.",
    )
    status = listing.add_mutually_exclusive_group()
    status.add_argument("--status", choices=list(RunStatus), help="only runs in this status")
    listing.add_argument("--batch", metavar="BATCH_ID", help="only this batch's runs")
    listing.add_argument(
        "--document",
        metavar="NAME",
        help="only runs of documents whose name (id) starts with this, e.g. contract-2024",
    )
    listing.add_argument("--needs-review", action="store_true", help="only runs awaiting a person")
    _add_common(listing, default_limit=20, most=200)
    listing.set_defaults(handler=cmd_runs_list)
    add_api_flags(listing)

    dashboard = sub.add_parser(
        "dashboard",
        help="the tenant's work at a glance: runs by status, reviews waiting, newest work",
        description="What the web pages' home shows: runs going on, waiting for a person "
        "(and the oldest's wait), ended in the last day by status; the newest batches with "
        "their progress and cost, and the newest runs.",
    )
    dashboard.add_argument("--json", action="store_true", help="everything, as the API answers")
    dashboard.set_defaults(handler=cmd_dashboard)
    add_api_flags(dashboard)


def add_batch_list(batch_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``docpipe batch list``, beside the batch group's other commands."""
    listing = batch_sub.add_parser(
        "list",
        help="batches newest first, with their progress and cost",
        description="Lists the tenant's batches, newest first: id, pipeline, status, runs "
        "ended of all (and awaiting a person), cost and age.",
    )
    listing.add_argument("--status", choices=list(BatchStatus), help="only batches in it")
    listing.add_argument(
        "--needs-review", action="store_true", help="only batches with runs awaiting a person"
    )
    _add_common(listing, default_limit=20, most=100)
    listing.set_defaults(handler=cmd_batch_list)
    add_api_flags(listing)


def _add_common(parser: argparse.ArgumentParser, *, default_limit: int, most: int) -> None:
    parser.add_argument("--pipeline", metavar="NAME:vN", help="only this pipeline's")
    parser.add_argument(
        "--since",
        type=_time,
        metavar="WHEN",
        help="created at or after: a time (2026-12-01, 2026-12-01T09:00Z) or an age "
        "(30m, 12h, 7d, 2w)",
    )
    parser.add_argument(
        "--until", type=_time, metavar="WHEN", help="created before: a time or an age"
    )
    parser.add_argument(
        "--limit", type=int, default=default_limit, help=f"at most this many (1-{most})"
    )
    parser.add_argument("--cursor", help="where the page before ended (as it says)")
    parser.add_argument("--json", action="store_true", help="the page as the API answers it")


def _time(text: str) -> str:
    """``text`` as an ISO 8601 time with its zone: an age counts back from now, a time
    without a zone is UTC."""
    if match := _RELATIVE.match(text.strip()):
        ago = timedelta(**{_UNITS[match[2]]: int(match[1])})
        return (datetime.now(UTC) - ago).isoformat(timespec="seconds")
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a time (2026-12-01T09:00Z) nor an age (30m, 12h, 7d, 2w)"
        ) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()


def cmd_runs_list(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        page = client.list_runs(
            status=RunStatus.NEEDS_REVIEW if args.needs_review else args.status,
            pipeline=args.pipeline,
            batch_id=args.batch,
            document=args.document,
            created_after=args.since,
            created_before=args.until,
            cursor=args.cursor,
            limit=str(args.limit),
        )
    if args.json:
        console.print_json(json.dumps(page))
        return 0
    show(_runs_table(page["runs"], datetime.now(UTC)))
    _next_page(args, page, "runs", "docpipe runs list")
    return 0


def _runs_table(runs: list[dict[str, Any]], now: datetime) -> Table:
    table = Table("run", "document", "pipeline", "status", "steps", "cost", "age")
    table.columns[0].no_wrap = True  # an id is copied whole into the next command
    for r in runs:
        table.add_row(
            r["run_id"],
            r["document_id"],
            r["pipeline"],
            _status(r),
            f"{r['steps_done']}/{r['steps_total']}",
            f"${r['cost_so_far_usd']:.4f}",
            _age(r["created_at"], now),
        )
    return table


def cmd_batch_list(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        page = client.list_batches(
            status=args.status,
            pipeline=args.pipeline,
            created_after=args.since,
            created_before=args.until,
            needs_review="true" if args.needs_review else None,
            cursor=args.cursor,
            limit=str(args.limit),
        )
    if args.json:
        console.print_json(json.dumps(page))
        return 0
    show(_batches_table(page["batches"], datetime.now(UTC)))
    _next_page(args, page, "batches", "docpipe batch list")
    return 0


def _batches_table(batches: list[dict[str, Any]], now: datetime) -> Table:
    table = Table("batch", "pipeline", "status", "runs ended", "in review", "cost", "age")
    table.columns[0].no_wrap = True
    for b in batches:
        table.add_row(
            b["batch_id"],
            b["pipeline"],
            b["status"],
            f"{b['runs_ended']}/{b['runs_total']}",
            str(b["runs_in_review"] or ""),
            f"${b['cost_so_far_usd']:.4f}",
            _age(b["created_at"], now),
        )
    return table


def cmd_dashboard(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        home = client.dashboard()
    if args.json:
        console.print_json(json.dumps(home))
        return 0
    now = datetime.now(UTC)
    for line in dashboard_lines(home, now):
        console.print(line, highlight=False, soft_wrap=True)
    if home["batches"]:
        console.print("newest batches ('docpipe batch list' for more)", highlight=False)
        show(_batches_table(home["batches"], now))
    if home["runs"]:
        console.print("newest runs ('docpipe runs list' for more)", highlight=False)
        show(_runs_table(home["runs"], now))
    return 0


def dashboard_lines(home: dict[str, Any], now: datetime) -> list[str]:
    """The figures of GET /dashboard in three lines: what goes on, what waits for a
    person (and for how long), what ended lately."""
    cap, by_status = home["cap"], home["runs_by_status"]

    def counted(n: int) -> str:
        return f"{n:,}+" if n >= cap else f"{n:,}"

    def counts(statuses: list[str]) -> str:
        return ", ".join(f"{counted(by_status.get(s, 0))} {s.replace('_', ' ')}" for s in statuses)

    waiting = home["review_waiting"]
    review = f"waiting for a person: {counted(waiting)} run{'' if waiting == 1 else 's'}"
    if home["review_oldest_since"]:
        oldest = _age(home["review_oldest_since"], now)
        review += f", the oldest for {oldest} ('docpipe review list')"
    ended = [str(s) for s in ENDED_RUN_STATUSES if s != RunStatus.NEEDS_REVIEW]
    since = datetime.fromisoformat(home["ended_since"]).astimezone(UTC)
    return [
        f"going on: {counts([str(s) for s in ACTIVE_RUN_STATUSES])}",
        review,
        f"ended since {since:%Y-%m-%d %H:%M} UTC: {counts(ended)}",
    ]


def _status(run: dict[str, Any]) -> str:
    if run["status"] in (RunStatus.QUEUED, RunStatus.RUNNING) and run["current_step"]:
        return f"{run['status']} ({run['current_step']})"
    return str(run["status"])


def _age(created_at: str, now: datetime) -> str:
    return age((now - datetime.fromisoformat(created_at)).total_seconds())


def _next_page(args: argparse.Namespace, page: dict[str, Any], items: str, command: str) -> None:
    """How many were shown, and the command that shows the next page (the same filters)."""
    shown, filters = len(page[items]), _filters_given(args)
    if not shown:
        console.print(f"no {items}" + (" with these filters" if filters else ""))
    elif page["next_cursor"]:
        again = [*filters, "--limit", str(args.limit), "--cursor", page["next_cursor"]]
        console.print(
            f"{shown} {items} shown; the next page: {command} {' '.join(again)}",
            highlight=False,
            soft_wrap=True,
        )


def _filters_given(args: argparse.Namespace) -> list[str]:
    """The filters given, as they would be typed again (an age as the time it meant)."""
    given = []
    for name in ("status", "pipeline", "batch", "document", "since", "until"):
        if (value := getattr(args, name, None)) is not None:
            given += [f"--{name}", str(value)]
    return [*given, "--needs-review"] if args.needs_review else given
