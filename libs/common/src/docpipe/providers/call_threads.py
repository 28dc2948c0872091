"""The threads that run steps' provider calls, one set shared by every step of a process.

A step's round of parallel calls (``StepCalls.ask_all``) used to start a thread pool of its
own and shut it down after: in a threads worker of 200 slots that was about 700 threads
created and ended per wave of steps, each with its stack and a glibc arena. Here an ended
call's thread waits for the next call of any step instead.

The number of threads is not bounded here: a call starts at once, in an idle thread, else
in a new one, so no call ever waits behind another step's calls (as none did with a pool
per step). What bounds them is the steps in flight: each waits for its round's answers
before the next round, so a process holds at most its slots x (step_call_concurrency - 1)
calls here (a round's first call runs on the step's own thread). Idle threads stay for the
next wave; they are daemons, as the threads pool's slots are, so an idle one never keeps the
process from exiting (a step ends only once its calls are answered and recorded).

The threads belong to the process that started them: a forked child (a prefork pool process)
starts its own set, never the parent's (whose threads do not exist in it).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["CallThreads", "call_threads"]

_T = TypeVar("_T")


class CallThreads:
    """Run calls in threads that are reused: an idle one if any, else a new one."""

    def __init__(self, name: str = "step-call") -> None:
        self._name = name
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self.started = 0  # threads started in all

    def submit(self, call: Callable[[], _T]) -> Future[_T]:
        """``call`` started now in a thread of the set; its answer or error in the future.
        A future cancelled before its thread takes it is never run."""
        future: Future[_T] = Future()
        with self._lock:
            start = self._idle == 0
            if start:
                self.started += 1
                number = self.started
            else:
                self._idle -= 1
        self._work.put((call, future))
        if start:
            threading.Thread(target=self._serve, name=f"{self._name}-{number}", daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            call, future = self._work.get()
            answer: Any = None
            error: BaseException | None = None
            run = future.set_running_or_notify_cancel()
            if run:
                try:
                    answer = call()
                except BaseException as exc:  # the caller's .result() raises it
                    error = exc
            # Idle before the answer is out: the step's next round, which the answer lets
            # go, finds this thread idle rather than starting one more.
            with self._lock:
                self._idle += 1
            if run:
                if error is None:
                    future.set_result(answer)
                else:
                    future.set_exception(error)
            del call, future, answer, error  # nothing of a step's is held while idle


_lock = threading.Lock()
_threads: CallThreads | None = None


def call_threads() -> CallThreads:
    """This process' call threads, started on first use."""
    global _threads
    with _lock:
        if _threads is None:
            _threads = CallThreads()
        return _threads


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads: it starts its own set (and takes a
    fresh lock, in case another thread of the parent held this one at the fork)."""
    global _threads, _lock
    _threads, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
