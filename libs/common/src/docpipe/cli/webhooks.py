"""``docpipe webhook-secret rotate | show``: the tenant's webhook signing secret, through the
API with the tenant's key (the same as POST and GET /webhook-secret)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from docpipe.cli.common import add_api_flags, api_client, console

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    secret = sub.add_parser(
        "webhook-secret",
        help="your tenant's webhook signing secret: rotate, show",
        description="Webhooks (a run's or batch's callback_url) are signed with your "
        "tenant's own secret; your receivers verify them with it.",
    )
    secret_sub = secret.add_subparsers(
        dest="webhook_secret_command", required=True, metavar="COMMAND"
    )
    rotate = secret_sub.add_parser(
        "rotate", help="create the signing secret, or rotate it (the new one is shown once)"
    )
    rotate.add_argument(
        "--previous-valid-for",
        type=float,
        metavar="SECONDS",
        help="how long the replaced secret keeps signing (default: the server's window; "
        "0: it stops now)",
    )
    rotate.set_defaults(handler=cmd_rotate)
    show = secret_sub.add_parser(
        "show", help="the ids and dates of the secrets that sign now (never the secrets)"
    )
    show.set_defaults(handler=cmd_show)
    for parser in (rotate, show):
        add_api_flags(parser)


def _describe(answer: dict[str, Any]) -> str:
    current = answer["current"]
    lines = [f"current secret {current['id']}, created {current['created_at']}"]
    if previous := answer.get("previous"):
        lines.append(f"previous secret {previous['id']} signs too until {previous['expires_at']}")
    return "\n".join(lines)


def cmd_rotate(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        answer = client.rotate_webhook_secret(args.previous_valid_for)
    # The secret alone on stdout (for $(docpipe webhook-secret rotate)); the note on stderr.
    Console(stderr=True).print(
        f"{_describe(answer)}\nthe secret is shown only now; give it to your receivers:"
    )
    print(answer["secret"])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with api_client(args) as client:
        console.print(_describe(client.webhook_secret()))
    return 0
