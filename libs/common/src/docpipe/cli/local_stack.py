"""What a running ``docpipe stack up`` leaves in its state directory for other commands: a
record of where everything is (``stack.json``: URLs, process ids, the database) and the
stack's API key (``api-key``), both readable by their owner only.

``docpipe stack status`` and ``stack down`` read the record; ``docpipe api-key`` and
``pipelines validate`` use it when nothing else names a database or providers. A record is
live while the process that wrote it runs; a stale one (its writer killed) is ignored.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "DEFAULT_STATE_DIR",
    "StackProcess",
    "StackRecord",
    "live_record",
    "masked_url",
    "read_record",
    "remove_record",
    "state_dir",
    "write_private",
    "write_record",
]

DEFAULT_STATE_DIR = ".local/stack"
RECORD_FILE = "stack.json"
KEY_FILE = "api-key"


@dataclass(frozen=True)
class StackProcess:
    name: str
    pid: int
    log: str


@dataclass(frozen=True)
class StackRecord:
    """Where a running stack is; ``pid`` is the supervising ``docpipe stack up``."""

    pid: int
    state_dir: str
    started_at: float  # seconds since the epoch
    api_url: str
    database_url: str
    redis_url: str
    llm_base_url: str
    llm: str  # fake, local (llama.cpp's server) or provider (DOCPIPE_LLM_BASE_URL's)
    models: dict[str, str]  # each model a step may ask, and the provider that has it
    processes: list[StackProcess] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=dict)

    @property
    def key_file(self) -> Path:
        return Path(self.state_dir) / KEY_FILE

    def alive(self) -> bool:
        return pid_alive(self.pid)


def state_dir(given: str | None = None) -> Path:
    """The stack's state directory: ``given``, else $DOCPIPE_STACK_DIR, else .local/stack."""
    return Path(given or os.environ.get("DOCPIPE_STACK_DIR") or DEFAULT_STATE_DIR)


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by its owner only from the start (never world
    readable, not even for a moment), replacing what was there in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(text)
    partial.replace(path)


def write_record(record: StackRecord) -> None:
    write_private(Path(record.state_dir) / RECORD_FILE, json.dumps(asdict(record), indent=2))


def read_record(directory: Path) -> StackRecord | None:
    """The record in ``directory``, live or not; None when there is none (or it is not one)."""
    try:
        data: dict[str, Any] = json.loads((directory / RECORD_FILE).read_text(encoding="utf-8"))
        processes = [StackProcess(**p) for p in data.pop("processes", [])]
        return StackRecord(**data, processes=processes)
    except (OSError, ValueError, TypeError):
        return None


def live_record(directory: Path) -> StackRecord | None:
    """The record of the stack running from ``directory``, or None."""
    record = read_record(directory)
    return record if record is not None and record.alive() else None


def remove_record(directory: Path, pid: int) -> None:
    """Remove the record if ``pid`` wrote it (a newer stack's stays)."""
    record = read_record(directory)
    if record is not None and record.pid == pid:
        (directory / RECORD_FILE).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, and not ours to judge
    # A zombie (exited, not yet reaped by its parent) is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def masked_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
