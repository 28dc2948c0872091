"""The tutorial (docs/getting-started/tutorial.md) re-run as a reader runs it: its shell
blocks in order, one line at a time, in an empty home folder, on a terminal; each output
block it shows is found, line by line and in order, in what the commands before it printed.
The stack is stopped and started again on the way, as the tutorial says, and its key
carries on. The two mistakes it shows are made: the pipeline file without its quotes is
checked by ``pipelines validate`` and started by ``stack up`` (which must stop before
starting anything).

What differs from one run to the next is matched as a kind, and carried into the commands
that follow: a run's id (the tutorial's ``88e3aa20-...`` is the id this run printed;
``RUN_ID``, the one the last ``submit`` printed), the API key (the tutorial shows it cut
short, ``dp_b2935670eec0_IGGc...``), a watch's elapsed time, the home folder, and a
pipeline definition's digest (any change to a built-in pipeline changes it). Tokens and
costs are the tutorial's own: a change of the built-in prompts is a change of its text.

What the test changes, and why:

- ``stack up`` gets ``--api-port`` and ``--metrics-port=0`` (and the commands
  DOCPIPE_API_URL): another stack, or a test, may hold port 8000 on this machine;
- the output is a terminal's, told to rich without a terminal (TTY_COMPATIBLE=1;
  TTY_INTERACTIVE=0: no animation, a progress bar printed once when it ends), COLUMNS
  wide, its colours taken out;
- three blocks do not run (NOT_RUN says why): ``make run``, the stack with llama.cpp's
  server (``make e2e-llm`` runs that one: e2e-llm/test_stack_llm_local.py) and the export
  of a paid provider's key;
- the broken file's ``stack up`` gets a state directory of its own, so that the tutorial's
  stack runs on, and so that "nothing started" can be seen: that directory is never made.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from docpipe_dev.localstack import free_port

# Marked by hand: `docpipe stack up`, run as a subprocess, starts the workers, beat and API.
pytestmark = [pytest.mark.slow, pytest.mark.processes, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "getting-started" / "tutorial.md"
COLUMNS = 160  # the width the tutorial's tables were drawn at

# Blocks a reader runs that this test does not, by what is in them.
NOT_RUN = {
    "make run": "step 1: it installs system packages; scripts/tutorial-from-a-fresh-clone "
    "runs it in a fresh clone, then this test",
    "--llm local": "llama.cpp's server, built by make e2e-llm, answers in minutes: "
    "e2e-llm/test_stack_llm_local.py runs this block",
    "DOCPIPE_LLM_API_KEY=sk-": "a paid provider's key",
}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
SAVE_AS = re.compile(r"Save this as `([^`]+)`")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# What varies, as the tutorial prints it: (its pattern there, what matches it in a run,
# whether the run's value stands in for the tutorial's in the commands that follow).
VARYING = [
    (UUID, UUID, True),
    (r"dp_[0-9a-f]+_\w+\.\.\.", r"dp_[0-9a-f]+_\S+", True),  # the key, cut short
    (r"\b[0-9a-f]{12}\b", r"[0-9a-f]{12}", False),  # a pipeline definition's digest
    (r"\d+:\d\d:\d\d", r"\d+:\d\d:\d\d", False),  # a watch's elapsed time
]
SPOTTER = re.compile("|".join(f"({doc})" for doc, _, _ in VARYING))


@dataclass
class Block:
    kind: str  # "sh", "yaml" or "" (what the commands printed)
    text: str
    before: str  # the prose between the previous block and this one


def blocks(page: Path = TUTORIAL) -> list[Block]:
    source = page.read_text(encoding="utf-8")
    found, start = [], 0
    for fence in FENCE.finditer(source):
        found.append(Block(fence[1], fence[2], source[start : fence.start()]))
        start = fence.end()
    return found


@dataclass
class Reader:
    """A shell the tutorial's lines run in one by one, keeping its folder and exports, and
    the values that varied: the tutorial's text for them and this run's."""

    home: Path
    port: int
    state: Path = field(init=False)
    seen: dict[str, str] = field(default_factory=dict)
    last_run_id: str | None = None

    def __post_init__(self) -> None:
        self.state = self.home / ".shell-state"
        self.state.write_text(f"cd {self.home}\n", encoding="utf-8")

    def run(self, line: str) -> str:
        for doc, now in self.seen.items():
            line = line.replace(doc, now)
        if self.last_run_id:
            line = line.replace("RUN_ID", self.last_run_id)
        line = line.replace(
            "docpipe stack up", f"docpipe stack up --api-port={self.port} --metrics-port=0"
        )
        script = (
            f"source {self.state}\n{line}\nstatus=$?\n"
            f'{{ export -p; printf "cd %q\\n" "$PWD"; }} > {self.state}\nexit $status\n'
        )
        done = subprocess.run(
            ["bash", "-c", script],
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
            check=False,
        )
        printed = ANSI.sub("", done.stdout)
        assert done.returncode == 0, f"$ {line}\n{printed}"
        if " submit " in f" {line} " and (ids := re.findall(UUID, printed)):
            self.last_run_id = ids[0]
        return printed

    def env(self) -> dict[str, str]:
        mine = {k: v for k, v in os.environ.items() if not k.startswith("DOCPIPE_")}
        return {
            **mine,
            "HOME": str(self.home),
            "PATH": f"{Path(sys.executable).parent}:{mine['PATH']}",
            "DOCPIPE_API_URL": f"http://127.0.0.1:{self.port}",
            "TTY_COMPATIBLE": "1",
            "TTY_INTERACTIVE": "0",
            "COLUMNS": str(COLUMNS),
        }

    def expect(self, shown: str, printed: str) -> None:
        """Every line of ``shown`` in ``printed``, in order; the values that vary noted."""
        lines = [line.rstrip() for line in printed.splitlines()]
        at = 0
        for wanted in shown.splitlines():
            pattern, varying = self.pattern(wanted.rstrip())
            while at < len(lines) and not (match := pattern.fullmatch(lines[at])):
                at += 1
            assert at < len(lines), f"the tutorial shows\n{wanted}\nnot printed in\n{printed}"
            for doc, group in varying:
                self.seen.setdefault(doc, match[group])
            at += 1

    def pattern(self, shown: str) -> tuple[re.Pattern[str], list[tuple[str, int]]]:
        shown = shown.replace("/root/", f"{self.home}/").replace(
            "127.0.0.1:8000", f"127.0.0.1:{self.port}"
        )
        parts, varying, start = [], [], 0
        for spot in SPOTTER.finditer(shown):
            parts.append(re.escape(shown[start : spot.start()]))
            kind = next(i for i, g in enumerate(spot.groups()) if g is not None)
            _, now, carried = VARYING[kind]
            if carried and spot[0] not in self.seen:
                varying.append((spot[0], len(varying) + 1))
                parts.append(f"({now})")
            elif carried:
                parts.append(re.escape(self.seen[spot[0]]))
            else:
                parts.append(now)
            start = spot.end()
        parts.append(re.escape(shown[start:]))
        return re.compile("".join(parts)), varying


@pytest.fixture
def home() -> Iterator[Path]:
    # As root, the stack's PostgreSQL runs as postgres, which must reach the folder.
    with tempfile.TemporaryDirectory(prefix="docpipe-tutorial-") as name:
        path = Path(name)
        path.chmod(0o711)
        try:
            yield path
        finally:
            folder = path / "docpipe-tutorial"
            if folder.is_dir():
                subprocess.run(
                    [sys.executable, "-m", "docpipe.cli", "stack", "down"],
                    cwd=folder,
                    capture_output=True,
                    timeout=300,
                    check=False,
                )


def test_the_tutorial_prints_what_it_shows_through_a_restart_of_the_stack(home: Path) -> None:
    reader = Reader(home, free_port())
    printed, ran, restarts = "", [], 0
    for block in blocks():
        if block.kind == "yaml":
            saved_as = SAVE_AS.findall(block.before)
            assert saved_as, f"a YAML block the tutorial does not say where to save:\n{block.text}"
            (home / "docpipe-tutorial" / saved_as[-1]).write_text(block.text, encoding="utf-8")
        elif block.kind == "sh" and any(marker in block.text for marker in NOT_RUN):
            continue
        elif block.kind == "sh":
            printed = ""
            for line in filter(None, block.text.splitlines()):
                command, _, comment = line.partition("  # ")
                output = reader.run(command)
                if "│" in comment:  # a row the line prints, shown beside it, spaces aside
                    row = " ".join(comment.split())
                    assert any(row in " ".join(line.split()) for line in output.splitlines()), (
                        f"$ {command}\ndoes not print a row of\n{row}\n{output}"
                    )
                printed += output
                ran.append(command.strip())
                restarts += command.startswith("docpipe stack down")
        elif block.text.startswith("error: "):
            reader.expect(block.text, broken_stack_up(reader))
        elif "not valid YAML" in block.text:
            reader.expect(block.text, broken_yaml(reader))
        else:
            reader.expect(block.text, printed)
    assert restarts == 1 and "docpipe results RUN_ID" in ran, ran


@contextmanager
def without_quotes(reader: Reader) -> Iterator[Path]:
    """The tutorial's pipeline file "without the quotes around the first ``instructions``"
    while the block runs; the file as it was afterwards."""
    path = reader.home / "docpipe-tutorial" / "pipelines" / "contract_brief.yaml"
    good = path.read_text(encoding="utf-8")
    first = re.search(r"instructions: '([^'\n]*)'", good)
    assert first, good
    path.write_text(good.replace(first[0], f"instructions: {first[1]}", 1), encoding="utf-8")
    try:
        yield path
    finally:
        path.write_text(good, encoding="utf-8")


def broken_yaml(reader: Reader) -> str:
    """What validate prints for the pipeline without its quotes."""
    with without_quotes(reader) as path:
        done = subprocess.run(
            ["docpipe", "pipelines", "validate", "pipelines/contract_brief.yaml"],
            cwd=path.parents[1],
            env=reader.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1, done.stdout
    return ANSI.sub("", done.stdout)


def broken_stack_up(reader: Reader) -> str:
    """What ``stack up`` prints for the pipeline without its quotes, started as step 5
    starts it, in a state directory of its own: nothing starts, so it is never made."""
    state = reader.home / "stack-of-a-broken-file"
    with without_quotes(reader) as path:
        done = subprocess.run(
            ["bash", "-c", "DOCPIPE_PIPELINES_DIR=$PWD/pipelines docpipe stack up --detach"],
            cwd=path.parents[1],
            env={**reader.env(), "DOCPIPE_STACK_DIR": str(state)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1, done.stdout
    assert not state.exists(), "stack up started something before it checked the file"
    return ANSI.sub("", done.stdout)
