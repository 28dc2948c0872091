"""What the local PostgreSQL and Redis share: errors, ports, process checks."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

INSTALL_HINT = (
    "install the Debian packages postgresql and redis-server, "
    "or set DOCPIPE_DATABASE_URL / DOCPIPE_REDIS_URL"
)

TIMEOUT_SECONDS = 30.0

LOG_TAIL_LINES = 25


class LocalServiceError(RuntimeError):
    """A local PostgreSQL or Redis could not be found, started or stopped."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_in_lock_file(lock_file: Path) -> int | None:
    try:
        first_line = lock_file.read_text().split("\n", 1)[0].strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return int(first_line) if first_line.isdigit() else None


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...), if any."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def is_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = proc_stat(pid)
    return fields is None or fields[0] not in ("Z", "X")


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def group_is_alive(pgid: int) -> bool:
    """True while any non-zombie process of process group `pgid` exists."""
    proc = Path("/proc")
    if not proc.is_dir():
        return is_alive(pgid)
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = proc_stat(int(entry.name))
            if fields is not None and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                return True
    return False


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def log_tail(log_file: Path) -> str:
    try:
        lines = log_file.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return ""
    return f"\n--- last lines of {log_file} ---\n" + "\n".join(lines)
