"""prometheus_client's multiprocess mode for a Celery prefork worker.

Each process of the pool writes its values into mmapped files of ``PROMETHEUS_MULTIPROC_DIR``
(named ``<type>_<pid>.db``); the worker's main process serves their sum. Two things the
library leaves to its user are done here:

- the directory: the operator's, emptied at start (a restarted container keeps its emptyDir
  and pids repeat, so old files would be added to the new counts), or a private temporary
  one when none is given, removed when the main process exits;
- exited processes: on every scrape, files of pids that no longer run are retired: live
  gauges are dropped (what ``mark_process_dead`` does) and counters and histograms are added
  into one ``<type>_archive.db`` each, so a pool recycled by ``max_tasks_per_child`` neither
  loses counts nor makes the directory and the scrape grow without bound. This also covers
  children killed without a chance to clean up (OOM, SIGKILL).
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import values
from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

__all__ = [
    "MULTIPROC_ENV",
    "PoolCollector",
    "multiprocess_dir",
    "prepare",
    "process_exiting",
    "retire_dead_processes",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def prepare() -> Path:
    """Put this process and every process it forks from now on into multiprocess mode.

    Call it before the first fork and before the first metric object is created. Returns
    the directory, empty.
    """
    given = multiprocess_dir()
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
    else:
        path = Path(tempfile.mkdtemp(prefix="docpipe-metrics-"))
        os.environ[MULTIPROC_ENV] = str(path)
        atexit.register(_remove_private_dir, path, os.getpid())
    # prometheus_client chose its value class from the environment when it was first
    # imported (Celery imports the task modules, and so prometheus_client, before any
    # worker signal); choose again now that the variable is set.
    values.ValueClass = values.get_value_class()
    return path


def _remove_private_dir(path: Path, owner: int) -> None:
    if os.getpid() == owner:  # never from a forked child
        shutil.rmtree(path, ignore_errors=True)


def process_exiting() -> None:
    """A pool process' last word: its live gauges (tasks running now) stop counting."""
    if path := multiprocess_dir():
        mark_process_dead(os.getpid(), path)


class PoolCollector(Collector):
    """The sum over the pool's files, after retiring the files of exited processes."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._inner = MultiProcessCollector(None, path)
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            retire_dead_processes(self._path)
            collected: list[Metric] = list(self._inner.collect())
        yield from collected


def retire_dead_processes(path: str) -> list[int]:
    """Fold the files of processes that no longer run into archives; returns their pids."""
    pids = {_pid_of(f) for f in glob.glob(os.path.join(path, "*.db"))}
    retired = []
    for pid in sorted(p for p in pids if p is not None and not _alive(p)):
        mark_process_dead(pid, path)
        for kind in ("counter", "histogram"):
            dead = os.path.join(path, f"{kind}_{pid}.db")
            if os.path.exists(dead):
                _add_into(os.path.join(path, f"{kind}_archive.db"), dead)
                os.remove(dead)
        retired.append(pid)
    return retired


def _pid_of(filename: str) -> int | None:
    tail = os.path.basename(filename).removesuffix(".db").rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process reuses the pid: keep its files
        return True
    return True


def _add_into(archive_path: str, dead_path: str) -> None:
    archive = MmapedDict(archive_path)
    try:
        for key, value, _timestamp, _pos in MmapedDict.read_all_values_from_file(dead_path):
            archived, _ = archive.read_value(key)
            archive.write_value(key, archived + value, 0.0)
    finally:
        archive.close()
