"""Interrupting a thread from another thread, as Celery's time limits interrupt a process.

A prefork pool process gets SIGUSR1 at its task's soft time limit, and the signal handler
raises ``SoftTimeLimitExceeded`` wherever the task is. A thread gets no signals: here
:func:`interrupt` raises the exception in it instead (CPython's
``PyThreadState_SetAsyncExc``), at the thread's next bytecode. Unlike a signal it does not
cut a blocking system call short: a thread waiting in a socket read sees it once the read
returns, which every provider call does within DOCPIPE_LLM_TIMEOUT_S.

One thing is better than a signal: a thread may shield a section that must not be cut in
two (:func:`shielded`). A provider call is paid for once its request has left; an
interruption raised between its answer and the answer's record would throw away what was
paid for, and the step's next attempt would pay again. An interruption that arrives inside
a shielded section is raised when the section ends. :func:`interrupt` with
``shield=False`` ignores shields (the thread is given up: whatever it does next is not
recorded anyway).

A thread that waits for something other threads finish (a step's round of calls) can wait
without waking to look for interruptions: inside :func:`waking`, an interruption of it also
sets the event it waits on, so the exception is raised as soon as the wait returns.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["StepAbandoned", "clear", "interrupt", "shielded", "waking"]


class StepAbandoned(BaseException):
    """Raised in a thread whose task passed its hard time limit: its step was given up (its
    calls abandoned, its lease handed on). A BaseException, so that no ``except Exception``
    of the step's own code or of docpipe's turns it into a recorded outcome."""


@dataclass
class _Shield:
    depth: int = 0
    pending: type[BaseException] | None = None


_lock = threading.Lock()
_shields: dict[int, _Shield] = {}
_wakers: dict[int, threading.Event] = {}


@contextmanager
def shielded() -> Iterator[None]:
    """Run the block whole: an interruption of this thread that arrives meanwhile is
    raised when the block ends (after its own exception, if it raised one)."""
    ident = threading.get_ident()
    with _lock:
        shield = _shields.setdefault(ident, _Shield())
        shield.depth += 1
    try:
        yield
    finally:
        with _lock:
            shield.depth -= 1
            pending = shield.pending if shield.depth == 0 else None
            if shield.depth == 0:
                del _shields[ident]
        if pending is not None:
            raise pending()


@contextmanager
def waking(event: threading.Event) -> Iterator[None]:
    """While the block runs, an interruption of this thread also sets ``event``: a wait on
    it returns, and the interruption is raised at once (an exception set for a thread lands
    at its next bytecode, never inside a wait)."""
    ident = threading.get_ident()
    with _lock:
        _wakers[ident] = event
    try:
        yield
    finally:
        with _lock:
            del _wakers[ident]


def interrupt(ident: int, exc: type[BaseException], *, shield: bool = True) -> None:
    """Raise ``exc`` in thread ``ident`` at its next bytecode, or when its shielded section
    ends (``shield``). The caller makes sure the thread still runs what it means to
    interrupt (docpipe.worker.thread_pool holds the task's lock)."""
    with _lock:
        held = _shields.get(ident)
        if shield and held is not None and held.depth > 0:
            held.pending = exc
            return
        waker = _wakers.get(ident)
    _set_async_exc(ident, exc)
    if waker is not None:
        waker.set()


def clear(ident: int) -> None:
    """Drop what :func:`interrupt` left for thread ``ident`` and it has not raised yet."""
    with _lock:
        if (held := _shields.get(ident)) is not None:
            held.pending = None
    _set_async_exc(ident, None)


def _set_async_exc(ident: int, exc: type[BaseException] | None) -> None:
    target = ctypes.py_object(exc) if exc is not None else None
    changed = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), target)
    if changed > 1:  # never: one thread has one id; undo rather than hit a stranger
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
        raise SystemError(f"interrupting thread {ident} reached {changed} threads")
