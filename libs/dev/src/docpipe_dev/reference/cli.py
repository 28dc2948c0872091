"""The CLI reference: every ``docpipe`` command with its usage, its help and each argument,
from the parsers themselves (installed plugins' commands included), and the exit codes."""

from __future__ import annotations

import argparse

from docpipe.cli import build_parser
from docpipe.cli.failures import ExitCode
from docpipe.cli.tree import commands, help_text
from docpipe.cli.tree import undocumented as cli_undocumented
from docpipe_dev.reference.markdown import cell, code, table

__all__ = ["exit_codes", "page", "undocumented"]

_WIDTH = 88


def undocumented() -> list[str]:
    return cli_undocumented(build_parser())


def exit_codes() -> str:
    return table(["code", "meaning"], [[code(c.value), cell(c.meaning)] for c in ExitCode])


def page() -> str:
    parts = []
    for command in commands(build_parser()):
        if len(command.path) == 1:
            continue  # docpipe itself: the page's introduction
        depth = "##" if len(command.path) == 2 else "###"
        parser = command.parser
        parts.append(f"{depth} {command.name}\n")
        parts.append(f"```\n{_usage(parser)}```\n")
        text = parser.description or command.help
        parts.append(cell(text) + "\n")
        rows = [
            [code(_name(a)), cell(help_text(parser, a))]
            for a in command.positionals + command.options
            if not isinstance(a, argparse._HelpAction)
        ]
        if rows and not command.subcommands:
            parts.append(table(["argument", "what it does"], rows))
    return "\n".join(parts)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help()


def _name(action: argparse.Action) -> str:
    if action.option_strings:
        choices = "{" + ",".join(str(c) for c in action.choices) + "}" if action.choices else ""
        value = "" if action.nargs == 0 else f" {action.metavar or choices or action.dest.upper()}"
        return ", ".join(action.option_strings) + value
    return str(action.metavar or action.dest)
