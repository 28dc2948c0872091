"""CPU time and memory of process trees, read from /proc (Linux only).

CPU of a tree = utime + stime + cutime + cstime summed over its live processes: a child
that exited and was reaped by a member moved its time into that member's c-fields, so every
CPU second spent by the tree since it started is counted exactly once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Memory", "cpu_seconds", "group_pids", "machine_busy_seconds", "memory", "tree_pids"]

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; everything after its ')' splits cleanly.
    return raw[raw.rindex(")") + 2 :].split()


def _all_stats() -> dict[int, list[str]]:
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            stats[int(entry)] = fields
    return stats


def group_pids(*pgids: int) -> list[int]:
    """Live processes whose process group is one of ``pgids``."""
    wanted = set(pgids)
    # After ')': state(0) ppid(1) pgrp(2) ...
    return [pid for pid, f in _all_stats().items() if int(f[2]) in wanted]


def tree_pids(*roots: int) -> list[int]:
    """``roots`` and all their live descendants."""
    children: dict[int, list[int]] = {}
    for pid, f in _all_stats().items():
        children.setdefault(int(f[1]), []).append(pid)
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if Path(f"/proc/{pid}").exists():
            found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU of these processes and of their reaped children."""
    total = 0
    for pid in pids:
        if (f := _stat(pid)) is not None:
            # utime(11) stime(12) cutime(13) cstime(14), counted after ')'.
            total += sum(int(x) for x in f[11:15])
    return total / _TICKS


def machine_busy_seconds() -> float:
    """CPU seconds every process of the machine has used since boot, all cores together
    (/proc/stat: all time but idle and iowait), other work on a shared machine included."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICKS


@dataclass(frozen=True)
class Memory:
    rss_bytes: int
    pss_bytes: int  # shared pages split between the processes sharing them (fork!)


def memory(pid: int) -> Memory:
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    except OSError:
        pss = rss
    return Memory(rss, pss)
