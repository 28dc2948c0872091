"""``docpipe eval``: evaluation sets (create, upload expected outputs, promote reviews), an
evaluation run with a progress bar and a results table, and two evaluations compared, or
gated for a team's CI (exit code 1 when the candidate is worse beyond noise)."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from docpipe.cli.client import DocpipeClient
from docpipe.cli.common import add_api_flags, api_client, console, show
from docpipe.cli.failures import ExitCode
from docpipe.cli.set_files import lines_with_files

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "eval",
        help="measure quality: evaluation sets, evaluations, compare and gate",
        description="An evaluation set holds documents with the output a pipeline's step "
        "should give; an evaluation runs a pipeline version over it (as a batch) and scores "
        "each field. Compare two, or gate a candidate against a baseline in CI.",
    )
    eval_sub = group.add_subparsers(dest="eval_command", required=True, metavar="COMMAND")
    for parser in [*_set_commands(eval_sub), *_run_commands(eval_sub)]:
        add_api_flags(parser)


def _set_commands(
    eval_sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> list[argparse.ArgumentParser]:
    sets = eval_sub.add_parser(
        "set", help="evaluation sets: create one, upload expected outputs, promote reviews"
    )
    set_sub = sets.add_subparsers(dest="set_command", required=True, metavar="COMMAND")
    create = set_sub.add_parser(
        "create",
        help="an empty set for a pipeline's step",
        description="Creates the set NAME for the step STEP of the pipeline PIPELINE (any "
        "version); the same again is the set as it is.",
    )
    create.add_argument("name", metavar="NAME", help="the set's name, unique in your tenant")
    create.add_argument("--pipeline", default="document_extract", help="a pipeline's name")
    create.add_argument(
        "--step", default="extract_fields", help="the step whose output is expected"
    )
    create.set_defaults(handler=cmd_set_create)
    upload = set_sub.add_parser(
        "upload",
        help="add expected outputs from a JSON-lines file: the set's next version",
        description='One item a line: {"document": "<id>", "expected": {...}}, '
        '{"document": {"id", "text"}, "expected": {...}}, or {"document": {"id", "path"}, '
        '"expected": {...}} for a PDF, Word file or image of this machine (a relative path '
        "from FILE's folder), sent with the lines. Every item must fit the step's "
        "output schema, or nothing changes (each error named with its line and JSON path). "
        "docpipe samples DIR --expected FILE writes such a file of sample contracts.",
    )
    upload.add_argument("name", metavar="NAME", help="the set's name or id")
    upload.add_argument("file", metavar="FILE.jsonl", help="the items, one JSON line each")
    upload.add_argument(
        "--source", choices=("upload", "samples"), default="upload", help="where it came from"
    )
    upload.set_defaults(handler=cmd_set_upload)
    promote = set_sub.add_parser(
        "promote",
        help="what a person approved becomes the expected output (one run, or a batch)",
    )
    promote.add_argument("name", metavar="NAME", help="the set's name or id")
    which = promote.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", metavar="RUN_ID", help="a run a person reviewed")
    which.add_argument("--batch", metavar="BATCH_ID", help="every reviewed run of the batch")
    promote.set_defaults(handler=cmd_set_promote)
    return [create, upload, promote]


def _run_commands(
    eval_sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> list[argparse.ArgumentParser]:
    run = eval_sub.add_parser(
        "run",
        help="evaluate a pipeline version on a set: a progress bar, then a results table",
        description="Runs PIPELINE over the set's items as a batch (answers the tenant already "
        "has for identical requests are reused, so re-evaluating a change pays for the "
        "change) and shows the accuracy of each field. Prints the evaluation's id first.",
    )
    run.add_argument("set", metavar="SET", help="the set's name or id")
    run.add_argument("--pipeline", required=True, help="name:vN")
    run.add_argument("--model", help="ask this model in every step that asks one")
    run.add_argument(
        "--step-model",
        action="append",
        default=[],
        metavar="STEP=MODEL",
        help="ask MODEL in STEP (repeat for more steps)",
    )
    run.add_argument("--budget-usd", metavar="DOLLARS", help="stop the evaluation past this")
    run.add_argument("--no-watch", action="store_true", help="print its id and return")
    run.set_defaults(handler=cmd_run)
    show_cmd = eval_sub.add_parser("show", help="an evaluation's progress or its results table")
    show_cmd.add_argument(
        "evaluation_id", metavar="EVALUATION_ID", help="the id docpipe eval run printed"
    )
    show_cmd.set_defaults(handler=cmd_show)
    compare = eval_sub.add_parser(
        "compare",
        help="B against A: per-field deltas, values that flipped, the accuracy difference "
        "with its paired 95 % interval, the cost delta",
    )
    compare.add_argument("baseline", metavar="A", help="the baseline evaluation's id")
    compare.add_argument("candidate", metavar="B", help="the candidate evaluation's id")
    compare.set_defaults(handler=cmd_compare)
    gate = eval_sub.add_parser(
        "gate",
        help="exit 1 when the candidate is worse than the baseline beyond noise",
        description="Fails (exit code 1) when the candidate's accuracy dropped by more than "
        "--max-drop and the paired 95 % interval of the difference lies wholly below zero: "
        "one document that flips among twenty is not a regression.",
    )
    gate.add_argument(
        "--baseline",
        required=True,
        metavar="EVALUATION_ID",
        help="what the candidate must not be worse than",
    )
    gate.add_argument(
        "--candidate", required=True, metavar="EVALUATION_ID", help="the evaluation of the change"
    )
    gate.add_argument(
        "--max-drop",
        type=float,
        default=0.02,
        help="the accuracy drop tolerated (default: %(default)s)",
    )
    gate.set_defaults(handler=cmd_gate)
    return [run, show_cmd, compare, gate]


def cmd_set_create(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        made = client.create_evaluation_set(args.name, args.pipeline, args.step)
    console.print(_set_line(made), highlight=False)
    return ExitCode.OK


def cmd_set_upload(args: argparse.Namespace) -> int:
    with tempfile.TemporaryFile() as lines:
        files = lines_with_files(Path(args.file), lines)
        with api_client(args, timeout_s=600) as client:
            if files:
                updated = client.upload_set_files(args.name, lines, files, args.source)
            else:
                updated = client.upload_set_items(args.name, lines, args.source)
    console.print(_set_line(updated), highlight=False)
    return ExitCode.OK


def cmd_set_promote(args: argparse.Namespace) -> int:
    which = {"run_id": args.run} if args.run else {"batch_id": args.batch}
    with api_client(args) as client:
        updated = client.promote_reviews(args.name, **which)
    console.print(_set_line(updated), highlight=False)
    return ExitCode.OK


def _set_line(found: dict[str, Any]) -> str:
    return (
        f"set {found['name']} ({found['pipeline']} step {found['step']}): version "
        f"{found['version']}, {found['items']} items"
    )


def cmd_run(args: argparse.Namespace) -> int:
    models = dict(m.split("=", 1) for m in args.step_model if "=" in m)
    if args.model:
        models["*"] = args.model
    body: dict[str, Any] = {"set": args.set, "pipeline": args.pipeline, "models": models}
    if args.budget_usd:
        body["budget_usd"] = args.budget_usd
    with api_client(args) as client:
        started = client.start_evaluation(body)
        console.print(f"evaluation {started['id']}", highlight=False)
        if args.no_watch:
            return ExitCode.OK
        return _watch(client, started["id"])


def cmd_show(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        found = client.evaluation(args.evaluation_id)
    if found["report"] is None:
        batch = found["batch"] or {}
        console.print(
            f"running: {batch.get('steps_done', 0)}/{batch.get('steps_total', 0)} steps",
            highlight=False,
        )
        return ExitCode.NOT_DONE
    _show_report(found)
    return ExitCode.OK


def _watch(client: DocpipeClient, evaluation_id: str) -> int:
    progress = Progress(
        TextColumn("{task.description:12}"),
        BarColumn(),
        TextColumn("{task.completed:>6.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[note]}"),
        console=console,
    )
    with progress:
        bar = progress.add_task("steps", total=1, note="")
        total = 1
        while True:
            found = client.evaluation(evaluation_id)
            if found["report"] is not None:
                # Its steps have all ended: the bar says so, not the last poll's count.
                progress.update(bar, completed=total)
                break
            batch = found["batch"] or {}
            total = batch.get("steps_total", 1)
            progress.update(
                bar,
                total=total,
                completed=batch.get("steps_done", 0),
                note=f"${float(batch.get('cost_so_far_usd', 0)):.6f}",
            )
            time.sleep(0.5)
    _show_report(found)
    return ExitCode.OK


def _show_report(found: dict[str, Any]) -> None:
    report = found["report"]
    table = Table(title=f"{found['pipeline']} on {found['set']} v{found['set_version']}")
    for column in ("field", "accuracy", "precision", "recall", "F1", "wrong", "missing", "extra"):
        table.add_column(column, justify="left" if column == "field" else "right")
    for row in [*report["fields"], {"path": "overall", **report["overall"]}]:
        table.add_row(
            row["path"],
            *(_share(row[k]) for k in ("accuracy", "precision", "recall", "f1")),
            *(f"{row[k]:g}" for k in ("wrong", "missing", "extra")),
        )
    show(table)
    latency = report["call_latency_ms"]
    console.print(
        f"{report['documents']} documents, {report['calls']} calls paid "
        f"({report['calls_reused']} reused), ${float(report['cost_usd']):.6f}; call latency "
        f"p50 {latency['p50']} ms, p95 {latency['p95']} ms; evidence "
        f"{_share(report['overall']['evidence'])}; review rules would pause "
        f"{_share(report['review']['paused_share'])} of the runs",
        highlight=False,
        soft_wrap=True,
    )


def cmd_compare(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        compared = client.compare_evaluations(args.baseline, args.candidate)
    _show_comparison(compared)
    return ExitCode.OK


def cmd_gate(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        compared = client.compare_evaluations(args.baseline, args.candidate, args.max_drop)
    _show_comparison(compared)
    difference = compared["accuracy"]["difference"]
    if compared["gate"]["regression"]:
        console.print(
            f"gate: FAILED: accuracy dropped by {-difference['mean']:.4f} (more than "
            f"{args.max_drop}), 95 % interval [{difference['low']:.4f}, {difference['high']:.4f}]",
            highlight=False,
        )
        return ExitCode.NOT_DONE
    console.print("gate: passed (no drop beyond noise)", highlight=False)
    return ExitCode.OK


def _show_comparison(compared: dict[str, Any]) -> None:
    table = Table(title=f"{compared['candidate']} against {compared['baseline']}")
    for column in ("field", "baseline", "candidate", "delta"):
        table.add_column(column, justify="left" if column == "field" else "right")
    for row in compared["fields"]:
        delta = row["delta"]
        table.add_row(
            row["path"],
            _share(row["baseline"]),
            _share(row["candidate"]),
            "" if delta is None else f"{delta:+.3f}",
        )
    show(table)
    accuracy, difference = compared["accuracy"], compared["accuracy"]["difference"]
    console.print(
        f"accuracy {_share(accuracy['baseline'])} -> {_share(accuracy['candidate'])}: "
        f"{difference['mean']:+.4f}, 95 % interval [{difference['low']:+.4f}, "
        f"{difference['high']:+.4f}] over {compared['documents']} documents; "
        f"{len(compared['flipped_to_wrong'])} values right -> wrong, "
        f"{len(compared['flipped_to_right'])} wrong -> right; cost "
        f"${float(compared['cost_usd']['baseline']):.6f} -> "
        f"${float(compared['cost_usd']['candidate']):.6f}",
        highlight=False,
        soft_wrap=True,
    )


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
