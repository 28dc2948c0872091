"""`docpipe completion bash | zsh` completes commands, options and choices in a real shell,
from the parsers themselves (a new command is completed without touching the script)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

SCRIPT_CMD = [sys.executable, "-m", "docpipe.cli", "completion"]


def script(shell: str) -> str:
    done = subprocess.run([*SCRIPT_CMD, shell], capture_output=True, text=True, check=True)
    return done.stdout


def shell_binary(name: str) -> str:
    binary = shutil.which(name)
    if binary is None:
        pytest.fail(f"{name} is missing: `make deps` installs it")
    return binary


def complete_in_bash(source: str, *words: str) -> list[str]:
    """What the completion offers after ``words`` (the last one being typed)."""
    line = " ".join(words)
    program = (
        f"{source}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}\n_docpipe\n"
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        [shell_binary("bash"), "-c", program], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


@pytest.fixture(scope="module")
def bash_script() -> str:
    return script("bash")


def test_bash_completes_commands_subcommands_options_and_choices(bash_script: str) -> None:
    assert {"submit", "results", "batch", "completion", "stack"} <= set(
        complete_in_bash(bash_script, "docpipe", "''")
    )
    assert complete_in_bash(bash_script, "docpipe", "re") == ["results", "review"]
    assert complete_in_bash(bash_script, "docpipe", "batch", "''") == [
        "submit",
        "watch",
        "cancel",
        "results",
        "list",
    ]
    assert set(complete_in_bash(bash_script, "docpipe", "submit", "--")) >= {
        "--lane",
        "--pipeline",
        "--watch",
        "--api",
        "--api-key",
        "--debug",
    }
    assert complete_in_bash(bash_script, "docpipe", "submit", "--lane", "''") == [
        "interactive",
        "batch",
    ]
    # After an option that takes a free value, and for files: nothing, so the shell offers
    # file names (complete -o default).
    assert complete_in_bash(bash_script, "docpipe", "submit", "--pipeline", "''") == []
    assert complete_in_bash(bash_script, "docpipe", "submit", "contract.pdf", "''") == []
    assert complete_in_bash(bash_script, "docpipe", "batch", "submit", "--w") == ["--watch"]


def test_zsh_loads_the_script_and_completes_through_bashcompinit() -> None:
    # Under zsh, compgen offers every candidate and zsh keeps those matching what is typed.
    program = f"""
autoload -U compinit && compinit -u
{script("zsh")}
print -r -- "registered: $_comps[docpipe]"
setopt ksharrays
COMP_WORDS=(docpipe batch ''); COMP_CWORD=2; _docpipe
print -r -- "batch: ${{COMPREPLY[@]}}"
COMP_WORDS=(docpipe submit --lane ''); COMP_CWORD=3; _docpipe
print -r -- "lanes: ${{COMPREPLY[@]}}"
"""
    done = subprocess.run(
        [shell_binary("zsh"), "-f", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "registered: _bash_complete -o default -F _docpipe",
        "batch: submit watch cancel results list",
        "lanes: interactive batch",
    ], done.stdout + done.stderr
