"""docpipe's processes as command lines, and a small supervisor for them.

The same argv start a service in a container image, in ``docpipe stack up`` and in the
test fixtures, so what the tests kill is exactly what production runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from docpipe.broker.queues import LANE_QUEUES, PERIODIC_QUEUE, WEBHOOK_QUEUE

__all__ = [
    "ManagedProcess",
    "api_argv",
    "beat_argv",
    "fake_llm_argv",
    "stop_together",
    "worker_argv",
]

# Each pool serves its lane's queue, the periodic maintenance queue and the webhook queue:
# deliveries in flight are capped (DOCPIPE_WEBHOOK_CONCURRENCY), so slow receivers never take
# every process of a pool.
WORKER_QUEUES: dict[str, str] = {
    lane: f"{queue},{PERIODIC_QUEUE},{WEBHOOK_QUEUE}" for lane, queue in LANE_QUEUES.items()
}


def worker_argv(lane: str, *, concurrency: int, name: str | None = None) -> list[str]:
    """A worker pool serving one lane (and the periodic and webhook queues), running
    ``concurrency`` steps at once: in as many processes, or with DOCPIPE_WORKER_POOL=threads
    as threads of one process (Celery takes the pool from docpipe's configuration when the
    command line names none)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "docpipe.worker.app",
        "worker",
        "--queues",
        WORKER_QUEUES[lane],
        "--hostname",
        f"{name or lane}@%h",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]


def beat_argv() -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "docpipe.worker.app",
        "beat",
        "--loglevel",
        "INFO",
    ]


def api_argv(*, host: str, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "docpipe_api.main:app",
        "--host",
        host,
        "--port",
        str(port),
        "--no-access-log",
    ]


def fake_llm_argv(*, host: str, port: int, latency_ms: str = "0:0", rpm: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "docpipe_fake_llm",
        "--host",
        host,
        "--port",
        str(port),
        "--latency-ms",
        latency_ms,
        "--rpm",
        str(rpm),
    ]


@dataclass
class ManagedProcess:
    """A child process whose output goes to a log file, started in its own process group
    so that a terminal's Ctrl-C reaches only the supervisor, which stops children in order."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)
    # Where this start's output begins in the log, which a restart appends to.
    _log_start: int = field(default=0, init=False)

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(
            list(self.argv),
            env={**os.environ, **self.env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, pattern: str, timeout_s: float = 30.0) -> None:
        """Block until ``pattern`` appears in the output of this start; fail if the process
        exits first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                output = log.read().decode("utf-8", errors="replace")
            if regex.search(output):
                return
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)
        raise TimeoutError(
            f"{self.name}: no {pattern!r} in {timeout_s}s:\n{self.log_text()[-3000:]}"
        )

    def signal(self, sig: signal.Signals) -> None:
        """Signal the main process only (as Kubernetes does), not its children."""
        if self.alive():
            os.kill(self.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL the whole process tree, as an OOM kill or a node loss would."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL the group; returns the exit code."""
        self.signal(signal.SIGTERM)
        return self.wait_stopped(timeout_s)

    def wait_stopped(self, timeout_s: float = 30.0) -> int | None:
        """Wait up to ``timeout_s`` for a process told to stop (see :meth:`signal`), then
        SIGKILL the group; returns the exit code."""
        if self.proc is None:
            return None
        if self.alive():
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill_group()
        else:
            self.kill_group()  # reap leftover children of a dead leader
        self._close_log()
        return self.proc.returncode


def stop_together(
    procs: Sequence[ManagedProcess], timeout_s: Callable[[ManagedProcess], float]
) -> list[int | None]:
    """SIGTERM to every one of ``procs``, then wait for each (up to ``timeout_s(proc)``, then
    SIGKILL): they drain together, so the slowest sets the time, not their sum. Returns the
    exit codes in ``procs``' order."""
    for proc in procs:
        proc.signal(signal.SIGTERM)
    return [proc.wait_stopped(timeout_s(proc)) for proc in procs]
