"""The threads pool: many steps in flight in one worker process, Celery's limits kept.

A step spends nearly all its time waiting for a provider; in a prefork pool each step in
flight costs a whole Python process (about 45 MB). Here each of the pool's ``--concurrency``
slots is a thread of the worker process: a step waiting on its provider costs a thread's
stack and the step's own objects. What Celery's own ``threads`` pool leaves out, this pool
does (docs/concepts/worker-pools.md):

- **time limits**: a watch thread (:class:`~docpipe.worker.time_limits.LimitWatch`) raises
  ``SoftTimeLimitExceeded`` in a task's thread at its soft limit, as the prefork pool's
  SIGUSR1 does; at the hard limit, where prefork kills the process, the task's step is
  given up (its calls stop, its lease is handed on, Celery records the task as timed out)
  and ``StepAbandoned`` is raised in its thread; a thread that still runs a while after
  that is stuck, and the process restarts itself;
- **memory per child**: a process past DOCPIPE_WORKER_MAX_MEMORY_PER_CHILD_MB restarts
  itself the same way;
- **restarting without losing steps**: Celery's warm shutdown stops taking messages, the
  steps in flight finish or are handed back (:meth:`ThreadSlotPool.on_stop`), then the
  process executes itself again (same pid, new PostgreSQL sessions);
- the pool's start and end send ``worker_process_init`` / ``worker_process_shutdown`` as a
  prefork pool process does, so tracing starts and resources close the same way.

The slots are daemon threads: a stuck one never keeps the process from exiting.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from billiard.einfo import ExceptionInfo
from billiard.exceptions import WorkerLostError
from celery import signals
from celery.concurrency.base import BasePool

from docpipe import interruptions
from docpipe.settings import get_settings
from docpipe.worker.restart import restart_after_shutdown
from docpipe.worker.time_limits import LimitWatch, Task, TaskState

__all__ = ["Task", "TaskState", "ThreadSlotPool", "on_hard_limit"]

log = logging.getLogger(__name__)

# How often a drain looks whether the steps in flight have ended.
_DRAIN_POLL_S = 0.1

# Called with a thread's id when its task passed its hard time limit, to give up what the
# thread holds (docpipe.worker.tasks gives up its steps' leases).
_hard_limit_hooks: list[Callable[[int], None]] = []


def on_hard_limit(hook: Callable[[int], None]) -> Callable[[int], None]:
    """Register ``hook(thread_id)`` to run when a task of that thread passes its hard limit."""
    _hard_limit_hooks.append(hook)
    return hook


class ThreadSlotPool(BasePool):  # type: ignore[misc]
    """Celery pool of ``limit`` threads (slots), each running one task at a time."""

    body_can_be_buffer = True
    signal_safe = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queue: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._tasks: set[Task] = set()  # queued, running, or given up with a live thread
        self._watch: LimitWatch | None = None
        self._restarting: str | None = None
        self.tasks_ended = 0

    # --- Celery's pool interface ----------------------------------------------------------

    def on_start(self) -> None:
        settings = get_settings()
        for n in range(self.limit):
            thread = threading.Thread(target=self._serve, name=f"slot-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._watch = LimitWatch(
            self,
            stuck_after_s=settings.llm_timeout_s,
            max_memory_bytes=settings.worker_max_memory_per_child_mb * 1024 * 1024,
        )
        self._watch.start()
        signals.worker_process_init.send(sender=None)

    def on_apply(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        callback: Callable[[Any], Any] | None = None,
        accept_callback: Callable[[int, float], Any] | None = None,
        timeout_callback: Callable[[bool, float], Any] | None = None,
        soft_timeout: float | None = None,
        timeout: float | None = None,
        **_: Any,
    ) -> Task:
        task = Task(
            target,
            tuple(args or ()),
            dict(kwargs or {}),
            callback,
            accept_callback,
            timeout_callback,
            # A task's own limits, else the worker's (task_soft_time_limit, task_time_limit).
            soft_timeout or self.options.get("soft_timeout"),
            timeout or self.options.get("timeout"),
        )
        with self._lock:
            self._tasks.add(task)
        self._queue.put(task)
        return task

    def on_stop(self) -> None:
        """Warm shutdown (SIGTERM) or a restart: Celery has stopped taking messages; the
        steps in flight finish, each within its time limits. A restart waits only
        DOCPIPE_WORKER_SOFT_SHUTDOWN_S for that, then hands back what still runs (interrupted
        as at its soft limit: answered calls stay memoised)."""
        settings = get_settings()
        hand_back_at = None
        if self._restarting is not None:
            hand_back_at = time.monotonic() + settings.worker_soft_shutdown_s
        self._drain(hand_back_at)
        self._close()

    def on_terminate(self) -> None:
        """Cold shutdown: every step in flight is handed back at once."""
        self._drain(time.monotonic())
        self._close()

    def _get_info(self) -> dict[str, Any]:
        info: dict[str, Any] = super()._get_info()
        info.update({"max-concurrency": self.limit, "threads": len(self._threads)})
        info["running"] = len(self.running())
        return info

    # --- what the watch and the metrics see -----------------------------------------------

    def running(self) -> list[Task]:
        """The tasks in a slot now (given-up ones too, while their thread lives)."""
        with self._lock:
            return [t for t in self._tasks if t.state is not TaskState.QUEUED]

    def soft_limit(self, task: Task) -> None:
        """Raise SoftTimeLimitExceeded in ``task``'s thread (when it leaves a shielded
        section), as Celery's prefork pool does with SIGUSR1."""
        from celery.exceptions import SoftTimeLimitExceeded

        with task.lock:
            if task.state is not TaskState.RUNNING or task.soft_sent:
                return
            task.soft_sent = True
            interruptions.interrupt(task.thread, SoftTimeLimitExceeded)
        if task.timeout_callback is not None and task.soft_s is not None:
            task.timeout_callback(True, task.soft_s)

    def hard_limit(self, task: Task) -> None:
        """Give ``task`` up: its step's calls stop and its lease is handed on (the hooks),
        Celery records it as timed out (and acknowledges its message), and StepAbandoned is
        raised in its thread, shields or not."""
        with task.lock:
            if task.state is not TaskState.RUNNING:
                return
            task.state = TaskState.GIVEN_UP
            interruptions.interrupt(task.thread, interruptions.StepAbandoned, shield=False)
        for hook in _hard_limit_hooks:
            try:
                hook(task.thread)
            except Exception:  # the lease then expires by its TTL: renewals stopped
                log.exception("giving up the steps of thread %d failed", task.thread)
        if task.timeout_callback is not None and task.hard_s is not None:
            task.timeout_callback(False, task.hard_s)

    def restart(self, reason: str) -> None:
        """Restart this process without losing its steps: warm shutdown, then exec."""
        if self._restarting is None:
            self._restarting = reason
            restart_after_shutdown(reason)

    # --- the slots --------------------------------------------------------------------------

    def _serve(self) -> None:
        while (task := self._queue.get()) is not None:
            try:
                self._run(task)
            except BaseException:  # never lose a slot: the task's own errors went to Celery
                log.exception("a slot's task ended badly")

    def _run(self, task: Task) -> None:
        with task.lock:
            if task.state is not TaskState.QUEUED:
                return  # dropped by a cold shutdown: its message goes back to the queue
            task.thread, task.started = threading.get_ident(), time.monotonic()
            task.state = TaskState.RUNNING
        result: Any = None
        try:
            try:
                if task.accept_callback is not None:
                    task.accept_callback(os.getpid(), task.started)
                result = task.target(*task.args, **task.kwargs)
            except BaseException as exc:
                result = _lost(exc)
        except BaseException as exc:  # an interruption that landed in the handler above
            result = _lost(exc)
        if self._end(task) and task.callback is not None:
            task.callback(result)

    def _end(self, task: Task) -> bool:
        """Mark ``task`` ended and drop any interruption still on its way to this thread;
        False when it had been given up (Celery was told it timed out)."""
        while True:
            try:
                with task.lock:
                    given_up = task.state is TaskState.GIVEN_UP
                    task.state = TaskState.ENDED
                    interruptions.clear(task.thread)
                break
            except BaseException:  # noqa: S112  (an interruption sent just before: it ends here)
                continue
        with self._lock:
            self._tasks.discard(task)
            self.tasks_ended += 1
        return not given_up

    def _drain(self, hand_back_at: float | None) -> None:
        """Wait until no task is queued or runs but given-up ones; past ``hand_back_at``
        interrupt the running ones (they hand their steps back) and drop the queued ones
        (their unacknowledged messages go back to the queue when Celery disconnects)."""
        while live := self._live():
            if hand_back_at is not None and time.monotonic() >= hand_back_at:
                for task in live:
                    self._drop_if_queued(task)
                    self.soft_limit(task)
            time.sleep(_DRAIN_POLL_S)
        if stuck := len(self.running()):
            log.warning("%d given-up task(s) still hold a thread; leaving them behind", stuck)

    def _live(self) -> list[Task]:
        with self._lock:
            return [t for t in self._tasks if t.state in (TaskState.QUEUED, TaskState.RUNNING)]

    def _drop_if_queued(self, task: Task) -> None:
        with task.lock:
            if task.state is not TaskState.QUEUED:
                return
            task.state = TaskState.ENDED
        with self._lock:
            self._tasks.discard(task)

    def _close(self) -> None:
        if self._watch is not None:
            self._watch.stop()
        for _ in self._threads:
            self._queue.put(None)
        signals.worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)


def _lost(exc: BaseException) -> ExceptionInfo:
    """What Celery's own pools report for a task that escaped its tracer (WorkerLostError)."""
    try:
        raise WorkerLostError(repr(exc)) from exc
    except WorkerLostError:
        return ExceptionInfo()
