"""The ``docpipe`` command as a tree of commands, read from its argparse parsers: what shell
completion offers and what the CLI reference in the docs lists, so neither can drift from
the parsers."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Command", "commands", "help_text", "undocumented"]


@dataclass(frozen=True)
class Command:
    """One parser of the tree: ``docpipe``, ``docpipe batch``, ``docpipe batch submit``..."""

    path: tuple[str, ...]
    parser: argparse.ArgumentParser
    help: str  # the line the parent's list shows; "" for docpipe itself
    subcommands: tuple[str, ...]

    @property
    def name(self) -> str:
        return " ".join(self.path)

    @property
    def options(self) -> list[argparse.Action]:
        return [a for a in self.parser._actions if a.option_strings]

    @property
    def positionals(self) -> list[argparse.Action]:
        return [
            a
            for a in self.parser._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
        ]


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("docpipe",), help_line: str = ""
) -> Iterator[Command]:
    """Every command of the tree, parents before their subcommands, in the order added."""
    children: list[tuple[str, argparse.ArgumentParser, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            children += [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]
    yield Command(path, parser, help_line, tuple(name for name, _, _ in children))
    for name, sub, sub_help in children:
        yield from commands(sub, (*path, name), sub_help)


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An argument's help with ``%(default)s`` and the like filled in, as --help shows it."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """What a user would find no explanation of: commands without a help line, arguments
    and options without a help text, each with what to add."""
    missing = []
    for command in commands(parser):
        if len(command.path) > 1 and not command.help:
            missing.append(f"command '{command.name}' has no help: pass help=... to add_parser")
        for action in command.options + command.positionals:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if not help_text(command.parser, action):
                what = "/".join(action.option_strings) or action.metavar or action.dest
                missing.append(
                    f"'{command.name} {what}' has no help text: pass help=... to add_argument"
                )
    return missing
