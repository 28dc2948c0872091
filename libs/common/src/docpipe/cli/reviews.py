"""``docpipe review list | show | approve | retry | reject``: the runs awaiting a person."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from docpipe.cli.client import DocpipeClient
from docpipe.cli.common import add_api_flags, age, api_client, console, show
from docpipe.cli.failures import UsageError

__all__ = ["register"]

_REASONS = ("invalid_output", "attempts_exhausted", "rule", "definition_changed")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    review = sub.add_parser(
        "review",
        help="the runs awaiting a person: list, show, approve, retry, reject",
        description="A run in needs_review waits for a person after the step a rule "
        "questioned (or that could not succeed by itself). A decision names the revision it "
        "was made on; the run then goes on at its next step, paying nothing again.",
    )
    review_sub = review.add_subparsers(dest="review_command", required=True, metavar="COMMAND")
    listing = review_sub.add_parser("list", help="runs awaiting review, oldest first")
    listing.add_argument("--pipeline", help="only runs of this pipeline key")
    listing.add_argument("--step", help="only reviews of this step")
    listing.add_argument("--reason", choices=_REASONS, help="only this kind of reason")
    listing.add_argument("--batch", help="only runs of this batch id")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (1-200)")
    listing.set_defaults(handler=cmd_list)
    show = review_sub.add_parser("show", help="why a run waits, its output and history")
    show.add_argument("run_id", metavar="RUN_ID", help="a run awaiting review, as list shows it")
    show.add_argument("--json", action="store_true", help="the whole review as JSON")
    show.set_defaults(handler=cmd_show)
    approve = review_sub.add_parser(
        "approve", help="accept the step's output, as it is or edited; the run goes on"
    )
    approve.add_argument("run_id", metavar="RUN_ID", help="the run whose step output you accept")
    approve.add_argument(
        "--edit",
        type=Path,
        metavar="FILE",
        help="a JSON file: the whole output (an object), or edits "
        '([{"path": "/fields/x", "action": "correct"|"clear"|"confirm", "value": ...}])',
    )
    approve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="POINTER=JSON",
        help="correct one value, e.g. --set /fields/term_months=24 (repeatable)",
    )
    retry = review_sub.add_parser("retry", help="run the step (or an earlier one) again")
    retry.add_argument("run_id", metavar="RUN_ID", help="the run whose step should run again")
    retry.add_argument("--from-step", help="this step or an earlier one (default: the step)")
    retry.add_argument("--model", help="a model the deployment knows, asked instead")
    reject = review_sub.add_parser("reject", help="end the run as failed, saying why")
    reject.add_argument("run_id", metavar="RUN_ID", help="the run to end as failed")
    reject.add_argument("--reason", required=True, help="why (recorded, and the run's error)")
    for parser, handler in ((approve, cmd_approve), (retry, cmd_retry), (reject, cmd_reject)):
        parser.add_argument(
            "--revision",
            type=int,
            help="the revision you decided on (default: the one the review has now)",
        )
        parser.add_argument("--note", help="a note kept with the decision")
        parser.set_defaults(handler=handler)
    for parser in (listing, show, approve, retry, reject):
        add_api_flags(parser)


def cmd_list(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        page = client.reviews(
            pipeline=args.pipeline,
            step=args.step,
            reason=args.reason,
            batch_id=args.batch,
            limit=str(args.limit),
        )
    table = Table("run", "pipeline", "document", "step", "reason", "waiting", "revision")
    table.columns[0].no_wrap = True  # an id is copied whole into the next command
    for r in page["reviews"]:
        why = "; ".join(x["message"] for x in r["reasons"]) or r["reason"]
        table.add_row(
            r["run_id"],
            r["pipeline"],
            r["document_id"],
            r["step"],
            why,
            age(r["age_s"]),
            str(r["revision"]),
        )
    show(table)
    if page["next_cursor"]:
        console.print(f"(more: {len(page['reviews'])} shown)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        detail = client.review(args.run_id)
    if args.json:
        console.print_json(json.dumps(detail))
        return 0
    r = detail["review"]
    console.print(
        f"run {r['run_id']} ({r['pipeline']}, document {r['document_id']}) waits at step "
        f"{r['step']} for {age(r['age_s'])}, revision {r['revision']}"
    )
    for reason in r["reasons"]:
        console.print(f"  - {reason['kind']}: {reason['message']}")
    for error in detail["errors"]:
        console.print(f"  ! {error}")
    console.print_json(json.dumps(detail["output"]))
    from docpipe.pipelines.evidence import support_label

    for e in detail["evidence"]:
        mark = escape(support_label(e))
        if not e["supported"]:
            mark = f"[red]{mark}[/red]"
        console.print(f"  {e['field']}: {json.dumps(e['value'])} <- {e['quote']!r} ({mark})")
    for d in detail["history"]:
        console.print(
            f"  {d['decided_at']} {d['reviewer_name']}: {d['action']}"
            + (f" ({d['reason']})" if d["reason"] else "")
        )
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    decision: dict[str, Any] = {"action": "approve"}
    edits: list[dict[str, Any]] = []
    if args.edit is not None:
        try:
            given = json.loads(args.edit.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UsageError(f"--edit {args.edit}: not JSON ({exc})") from None
        if isinstance(given, dict):
            decision["output"] = given
        else:
            edits += given
    for assignment in args.set:
        edits.append({"action": "correct", **_assignment(assignment)})
    if edits:
        decision["edits"] = edits
    return _decide(args, decision)


def _assignment(assignment: str) -> dict[str, Any]:
    """``POINTER=JSON`` as an edit's path and value; UsageError (exit 2) saying how to write
    it, a string quoted as JSON, otherwise."""
    pointer, sep, value = assignment.partition("=")
    if not sep or not pointer.startswith("/"):
        raise UsageError(f"--set {assignment!r}: write POINTER=JSON, e.g. --set /fields/x=12")
    try:
        return {"path": pointer, "value": json.loads(value)}
    except json.JSONDecodeError:
        quoted = json.dumps(value)
        raise UsageError(
            f"--set {assignment!r}: the value is not JSON; quote a string as JSON, e.g. "
            f"--set '{pointer}={quoted}'"
        ) from None


def cmd_retry(args: argparse.Namespace) -> int:
    return _decide(args, {"action": "retry", "from_step": args.from_step, "model": args.model})


def cmd_reject(args: argparse.Namespace) -> int:
    return _decide(args, {"action": "reject", "reason": args.reason})


def _decide(args: argparse.Namespace, decision: dict[str, Any]) -> int:
    with api_client(args) as client:
        decision["revision"] = (
            args.revision if args.revision is not None else _revision(client, args.run_id)
        )
        if args.note and "reason" not in decision:
            decision["reason"] = args.note
        run = client.decide(args.run_id, {k: v for k, v in decision.items() if v is not None})
    console.print(f"run {run['run_id']}: {decision['action']} recorded; the run is {run['status']}")
    return 0


def _revision(client: DocpipeClient, run_id: str) -> int:
    return int(client.review(run_id)["review"]["revision"])
