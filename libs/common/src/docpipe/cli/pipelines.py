"""``docpipe pipelines list | show KEY | validate FILE...``: what the API runs, and a check
of pipeline files for their authors (exit code 1 when a file is wrong)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection
from pathlib import Path

from rich.table import Table

from docpipe.cli.common import add_api_flags, api_client, console, show
from docpipe.cli.local_stack import live_record, state_dir

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "pipelines",
        help="the pipelines the API runs, and a check of pipeline files you write",
        description="What a deployment runs (list, show), and the checks the workers make "
        "of a pipeline file, for its author (validate).",
    )
    group_sub = group.add_subparsers(dest="pipelines_command", required=True, metavar="COMMAND")
    listing = group_sub.add_parser(
        "list", help="the pipelines this deployment runs, with their steps"
    )
    listing.set_defaults(handler=cmd_list)
    show = group_sub.add_parser(
        "show", help="one pipeline's steps, models, prompt versions and schemas, as JSON"
    )
    show.add_argument("key", metavar="KEY", help="the pipeline as name:vN, e.g. nda_review:v1")
    show.set_defaults(handler=cmd_show)
    for parser in (listing, show):
        add_api_flags(parser)
    validate = group_sub.add_parser(
        "validate",
        help="check pipeline files as the workers would load them (exit 1 if one is wrong)",
        description="Loads each file as a worker would and prints 'ok' with its steps, or "
        "file:line: what is wrong. Needs no API and no database. The models its steps ask "
        "are checked against the providers of the local stack running from "
        "$DOCPIPE_STACK_DIR (else .local/stack), else against the providers configured here "
        "(DOCPIPE_PROVIDERS or DOCPIPE_MODEL_PRICES), as the workers would check them.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="pipeline files (.yaml)")
    validate.set_defaults(handler=cmd_validate)


def cmd_list(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        found = client.pipelines()
    table = Table(title="pipelines")
    for column in ("key", "steps", "source", "definition"):
        table.add_column(column)
    for p in found:
        table.add_row(p["key"], " -> ".join(p["steps"]), p["source"], p["definition_hash"][:12])
    show(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        console.print_json(json.dumps(client.pipeline(args.key)))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Each file loaded and checked as the workers would: its models against the providers
    this command can see (:func:`_known_models`)."""
    from docpipe.pipelines.catalog import check_answer_schemas, check_models
    from docpipe.pipelines.files import load_pipeline_file
    from docpipe.pipelines.model import PipelineError

    known, where = _known_models()
    wrong = 0
    for name in args.files:
        path = Path(name)
        try:
            pipeline = load_pipeline_file(path.read_text(encoding="utf-8"), str(path))
            if known is not None:
                check_models(pipeline, known)
            check_answer_schemas(pipeline)
        except (OSError, UnicodeDecodeError) as exc:
            console.print(f"[red]{path}: cannot read it ({exc})[/red]")
            wrong += 1
        except PipelineError as exc:
            console.print(f"[red]{exc}[/red]", highlight=False, soft_wrap=True)
            wrong += 1
        else:
            steps = " -> ".join(pipeline.step_names)
            console.print(f"{path}: ok, {pipeline.key} ({steps})", highlight=False)
    console.print(f"(models: {where})", highlight=False, soft_wrap=True)
    return 1 if wrong else 0


def _known_models() -> tuple[Collection[str] | None, str]:
    """The models a step may ask, and whose they are: the running local stack's, else this
    environment's settings; None (and why) when neither can be seen."""
    from pydantic import ValidationError

    from docpipe.settings import get_settings

    directory = state_dir()
    if (stack := live_record(directory.resolve())) is not None:
        return stack.models, f"checked against the local stack's providers ({directory})"
    try:
        models = get_settings().provider_table.models
    except (ValidationError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:200]
        return None, f"not checked: the provider settings here do not load ({reason})"
    return models, "checked against DOCPIPE_PROVIDERS / DOCPIPE_MODEL_PRICES here"
