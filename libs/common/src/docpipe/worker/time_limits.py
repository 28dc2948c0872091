"""Celery's time limits and memory bound for tasks that run as threads of one process.

:class:`LimitWatch` looks at the pool's tasks every :data:`TICK_S`: a task past its soft
limit is interrupted, one past its hard limit is given up, and the process restarts itself
when a given-up task's thread still runs ``stuck_after_s`` later (it is stuck in code that
no interruption reaches: a C call, a wait without a timeout) or when its resident memory
passes its bound (DOCPIPE_WORKER_MAX_MEMORY_PER_CHILD_MB, which a prefork pool applies to
each pool process).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

__all__ = ["TICK_S", "LimitWatch", "Task", "TaskState", "resident_bytes"]

log = logging.getLogger(__name__)

TICK_S = 0.1
_MEMORY_EVERY_S = 1.0
_PAGE = os.sysconf("SC_PAGE_SIZE")


class TaskState(Enum):
    QUEUED = "queued"
    RUNNING = "running"
    GIVEN_UP = "given up"  # past its hard limit; its thread may still run (stuck)
    ENDED = "ended"


@dataclass(eq=False)
class Task:
    """One Celery task in a slot: what to run, its limits and where it stands."""

    target: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    callback: Callable[[Any], Any] | None
    accept_callback: Callable[[int, float], Any] | None
    timeout_callback: Callable[[bool, float], Any] | None
    soft_s: float | None
    hard_s: float | None
    state: TaskState = TaskState.QUEUED
    thread: int = 0
    started: float = 0.0  # monotonic
    soft_sent: bool = False
    # Held while the state changes or the thread is interrupted: an interruption meant for
    # this task never reaches the thread's next one.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def age_s(self, now: float) -> float:
        return now - self.started if self.started else 0.0


class Slots(Protocol):
    tasks_ended: int

    def running(self) -> list[Task]: ...

    def soft_limit(self, task: Task) -> None: ...

    def hard_limit(self, task: Task) -> None: ...

    def restart(self, reason: str) -> None: ...


def resident_bytes() -> int:
    """This process' resident memory now (not its peak: that survives an exec)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * _PAGE


class LimitWatch:
    """The thread that keeps the pool's tasks within their limits."""

    def __init__(self, slots: Slots, *, stuck_after_s: float, max_memory_bytes: int) -> None:
        self._slots = slots
        self._stuck_after_s = stuck_after_s
        self._max_memory_bytes = max_memory_bytes
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="limit-watch", daemon=True)
        self._memory_checked = 0.0
        self._ended_at_check = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(TICK_S):
            try:
                self.check(time.monotonic())
            except Exception:  # the watch must outlive any one task's trouble
                log.exception("time limit watch")

    def check(self, now: float) -> None:
        """One look at every task (and, once a second, at the process' memory)."""
        for task in self._slots.running():
            age = task.age_s(now)
            if task.state is TaskState.RUNNING:
                if task.soft_s is not None and age >= task.soft_s:
                    self._slots.soft_limit(task)
                if task.hard_s is not None and age >= task.hard_s:
                    self._slots.hard_limit(task)
            elif (
                task.state is TaskState.GIVEN_UP
                and task.hard_s is not None
                and age >= task.hard_s + self._stuck_after_s
            ):
                self._slots.restart(
                    f"a task's thread is stuck {age - task.hard_s:.0f}s past its hard "
                    f"time limit ({task.hard_s:g}s)"
                )
        # As a prefork pool judges its processes: after work, once a task has ended since
        # the last look (a process that starts past its bound still gets work done).
        ended = self._slots.tasks_ended
        if now - self._memory_checked >= _MEMORY_EVERY_S and ended != self._ended_at_check:
            self._memory_checked, self._ended_at_check = now, ended
            if (rss := resident_bytes()) > self._max_memory_bytes:
                self._slots.restart(
                    f"resident memory {rss / 2**20:.0f} MiB is past "
                    f"DOCPIPE_WORKER_MAX_MEMORY_PER_CHILD_MB={self._max_memory_bytes // 2**20}"
                )
