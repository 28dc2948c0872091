"""``docpipe completion bash | zsh``: a shell completion script made from the command's own
parsers (commands, options, an option's choices; file names where a file is expected).

The script is static: completing costs the shell no Python start. zsh runs the same
function through its ``bashcompinit``.
"""

from __future__ import annotations

import argparse
import shlex

from docpipe.cli.tree import commands

__all__ = ["completion_script", "register"]

SHELLS = ("bash", "zsh")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script for bash or zsh",
        description="Prints a script that completes docpipe's commands, options and their "
        "choices. Load it from your shell's start-up file: "
        'eval "$(docpipe completion bash)" in ~/.bashrc, or '
        'eval "$(docpipe completion zsh)" in ~/.zshrc.',
    )
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    completion.set_defaults(handler=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    from docpipe.cli import build_parser

    print(completion_script(build_parser(), args.shell))
    return 0


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser``'s whole tree for ``shell``."""
    subcommands, options, values = [], [], []
    for command in commands(parser):
        key = shlex.quote(command.name)
        if command.subcommands:
            names = shlex.quote(" ".join(command.subcommands))
            subcommands.append(f"        {key}) echo {names} ;;")
        flags = [flag for action in command.options for flag in action.option_strings]
        options.append(f"        {key}) echo {shlex.quote(' '.join(flags))} ;;")
        for action in command.options:
            if action.nargs == 0:  # a flag: no value follows it
                continue
            words = " ".join(str(c) for c in action.choices or ())
            for flag in action.option_strings:
                values.append(
                    f"        {shlex.quote(command.name + '|' + flag)}) "
                    f"echo {shlex.quote(words)} ;;"
                )
    body = _BASH.format(
        subcommands="\n".join(subcommands),
        options="\n".join(options),
        values="\n".join(values),
    )
    if shell == "zsh":
        return "#compdef docpipe\nautoload -U +X bashcompinit && bashcompinit\n" + body
    return body


# After an option that takes a value: its choices, if any (none: the shell completes file
# names). Otherwise the subcommands of the command typed so far, or its options after "-".
_BASH = """\
# docpipe completion, made by `docpipe completion`
_docpipe_subcommands() {{
    case "$1" in
{subcommands}
    esac
}}
_docpipe_options() {{
    case "$1" in
{options}
    esac
}}
_docpipe_value() {{
    case "$1" in
{values}
        *) return 1 ;;
    esac
}}
_docpipe() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" command="docpipe" word i words
    local prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case " $(_docpipe_subcommands "$command") " in
            *" $word "*) command="$command $word" ;;
        esac
    done
    if words="$(_docpipe_value "$command|$prev")"; then
        :
    elif [[ "$cur" == -* ]]; then
        words="$(_docpipe_options "$command")"
    else
        words="$(_docpipe_subcommands "$command")"
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _docpipe docpipe"""
