"""``docpipe migrate`` and ``docpipe api-key create | list | revoke``: the commands that
work straight in the database (DOCPIPE_DATABASE_URL)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from docpipe.cli.common import console, errors, show
from docpipe.cli.failures import ExitCode
from docpipe.cli.local_stack import live_record, state_dir

if TYPE_CHECKING:
    from docpipe.state.db import Database

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = sub.add_parser(
        "migrate",
        help="create or update the database schema (safe to run again, and concurrently)",
        description="Applies the migrations the database at DOCPIPE_DATABASE_URL lacks, then "
        "checks the pipelines this deployment loads: exit code 1 when one is broken, or "
        "changes a definition that active runs started with (the chart's migration Job "
        "runs this, so such a release fails before any process starts).",
    )
    migrate.add_argument(
        "--lock-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="longest wait for one lock before a migration rolls back and "
        "tries again, so that it never blocks the tables for long "
        "(default: %(default)s)",
    )
    migrate.add_argument(
        "--attempts",
        type=int,
        default=5,
        metavar="N",
        help="tries per migration before giving up (default: %(default)s)",
    )
    migrate.set_defaults(handler=cmd_migrate)

    api_key = sub.add_parser(
        "api-key",
        help="tenants' API keys: create, list, revoke (in the database directly)",
        description="API keys are managed in the database at DOCPIPE_DATABASE_URL, not "
        "through the API: run these where the database is reachable. Without "
        "DOCPIPE_DATABASE_URL, the database of the local stack running from "
        "$DOCPIPE_STACK_DIR (else .local/stack) is used.",
    )
    api_key_sub = api_key.add_subparsers(dest="api_key_command", required=True, metavar="COMMAND")
    create = api_key_sub.add_parser(
        "create",
        help="make an API key for a tenant; it is printed once",
        description="Makes a new API key for TENANT and prints it once, alone on stdout "
        "(export DOCPIPE_API_KEY=$(docpipe api-key create acme)); only its hash is kept.",
    )
    create.add_argument(
        "tenant",
        metavar="TENANT",
        help="the tenant the key acts for, e.g. acme (letters, digits, '._-')",
    )
    create.add_argument("--name", default="", help="what the key is for, shown by list")
    create.set_defaults(handler=cmd_api_key_create)
    listing = api_key_sub.add_parser(
        "list", help="every API key with its tenant, name and dates (never the secrets)"
    )
    listing.add_argument("--tenant", metavar="TENANT", help="only this tenant's keys")
    listing.set_defaults(handler=cmd_api_key_list)
    revoke = api_key_sub.add_parser(
        "revoke",
        help="revoke an API key: its next request is refused",
        description="Revokes the key at once: its next request gets 401 and its open event "
        "streams end. Exit code 1 when no active key has this id.",
    )
    revoke.add_argument(
        "key_id",
        metavar="KEY_ID",
        help="the key's id: the <id> of dp_<id>_<secret>, as list shows it",
    )
    revoke.set_defaults(handler=cmd_api_key_revoke)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply the migrations, then check the pipelines this deployment would load: a broken
    definition, or one that changes what active runs started with, fails the command (and
    so the chart's migration Job, and with it the release)."""
    from docpipe.pipelines.catalog import load_catalog
    from docpipe.pipelines.model import PipelineError
    from docpipe.settings import get_settings
    from docpipe.state.definitions import check_running_definitions
    from docpipe.state.migrate import MigrationLockTimeout, apply_migrations

    settings = get_settings()
    try:
        applied = apply_migrations(
            settings.database_url, lock_timeout_s=args.lock_timeout, attempts=args.attempts
        )
    except MigrationLockTimeout as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    console.print(f"applied: {', '.join(applied)}" if applied else "schema is up to date")
    try:
        pipelines = load_catalog(settings)
        with _database() as db:
            check_running_definitions(db, pipelines)
    except PipelineError as exc:
        console.print(f"[red]pipelines refused:[/red] {exc}", highlight=False, soft_wrap=True)
        return 1
    console.print(f"pipelines: {', '.join(p.key for p in pipelines)}")
    return 0


@contextmanager
def _database() -> Iterator[Database]:
    """The database of DOCPIPE_DATABASE_URL, else of the local stack running from
    $DOCPIPE_STACK_DIR (or .local/stack), else the settings' default (API keys are managed
    there directly)."""
    from docpipe.settings import get_settings
    from docpipe.state.db import Database, Timeouts

    url = get_settings().database_url
    if not os.environ.get("DOCPIPE_DATABASE_URL"):
        directory = state_dir()
        if (stack := live_record(directory.resolve())) is not None:
            url = stack.database_url
            errors.print(f"(the database of the local stack running from {directory})")
    db = Database(url, max_size=1, timeouts=Timeouts.of(get_settings()))
    try:
        yield db
    finally:
        db.close()


def cmd_api_key_create(args: argparse.Namespace) -> int:
    from docpipe.errors import InvalidRequestError
    from docpipe.state.tenants import create_api_key

    try:
        with _database() as db:
            created = create_api_key(db, args.tenant, args.name)
    except InvalidRequestError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return ExitCode.USAGE
    # The key alone on stdout (for $(docpipe api-key create ...)); the note on stderr.
    Console(stderr=True).print(
        f"API key {created.key.id} for tenant {created.key.tenant_id!r}; it is shown only "
        "now, store it (e.g. as DOCPIPE_API_KEY):"
    )
    print(created.plaintext)
    return 0


def cmd_api_key_list(args: argparse.Namespace) -> int:
    from docpipe.state.tenants import list_api_keys

    with _database() as db:
        keys = list_api_keys(db, args.tenant)
    table = Table(title="API keys")
    for column in ("id", "tenant", "name", "created", "last used", "revoked"):
        table.add_column(column)

    def when(moment: datetime | None) -> str:
        return moment.strftime("%Y-%m-%d %H:%M") if moment else ""

    for key in keys:
        table.add_row(
            key.id,
            key.tenant_id,
            key.name,
            when(key.created_at),
            when(key.last_used_at),
            when(key.revoked_at),
        )
    show(table)
    return 0


def cmd_api_key_revoke(args: argparse.Namespace) -> int:
    from docpipe.state.tenants import revoke_api_key

    with _database() as db:
        revoked = revoke_api_key(db, args.key_id)
    if revoked is None:
        console.print(f"[red]no active API key {args.key_id!r}[/red] (unknown or revoked already)")
        return 1
    console.print(f"revoked API key {revoked.id} of tenant {revoked.tenant_id!r}")
    return 0
