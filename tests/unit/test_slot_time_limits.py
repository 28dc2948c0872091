"""The threads pool's time limits and interruptions, in this process: a pool of real
threads, targets that wait as steps do, Celery's callbacks recorded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from docpipe import interruptions
from docpipe.interruptions import StepAbandoned
from docpipe.providers.calls import _wait_for_round
from docpipe.worker import thread_pool
from docpipe.worker.thread_pool import ThreadSlotPool


class Recorder:
    """What Celery would hear from the pool: results, time-outs, the hard-limit hooks."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()

    def add(self, kind: str, value: Any = None) -> None:
        with self.lock:
            self.events.append((kind, value))

    def kinds(self) -> list[str]:
        with self.lock:
            return [kind for kind, _ in self.events]


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThreadSlotPool]:
    restarts: list[str] = []
    monkeypatch.setattr(thread_pool, "restart_after_shutdown", restarts.append)
    made = ThreadSlotPool(limit=3, soft_timeout=0.3, timeout=0.8)
    made.start()
    made.restarts = restarts  # type: ignore[attr-defined]
    yield made
    made.stop()


def apply(pool: ThreadSlotPool, target: Any, recorder: Recorder) -> None:
    def callback(result: Any) -> None:
        recorder.add("result", result)
        recorder.done.set()

    pool.apply_async(
        target,
        callback=callback,
        accept_callback=lambda pid, at: recorder.add("accepted"),
        timeout_callback=lambda soft, limit: recorder.add("soft" if soft else "hard", limit),
    )


def wait_for(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.01)


def test_an_interruption_waits_for_the_end_of_a_shielded_section() -> None:
    order: list[str] = []
    inside = threading.Event()
    leave = threading.Event()

    def work() -> None:
        try:
            with interruptions.shielded():
                inside.set()
                leave.wait(5)
                order.append("section done")
            order.append("after the section")  # never: the interruption is raised first
        except SoftTimeLimitExceeded:
            order.append("interrupted")

    thread = threading.Thread(target=work)
    thread.start()
    inside.wait(5)
    assert thread.ident is not None
    interruptions.interrupt(thread.ident, SoftTimeLimitExceeded)
    leave.set()
    thread.join(5)
    assert order == ["section done", "interrupted"]


def test_a_thread_waiting_on_its_event_wakes_for_an_interruption() -> None:
    """Inside ``waking``, an interruption sets the event the thread waits on: the thread
    needs no wake-ups of its own to see it (an exception set for a thread lands only at its
    next bytecode, and a wait is one)."""
    order: list[str] = []
    waiting = threading.Event()
    event = threading.Event()

    def work() -> None:
        try:
            with interruptions.waking(event):
                waiting.set()
                event.wait(60)
                order.append("woken")  # never: the interruption is raised first
        except SoftTimeLimitExceeded:
            order.append("interrupted")

    thread = threading.Thread(target=work)
    thread.start()
    waiting.wait(5)
    assert thread.ident is not None
    interruptions.interrupt(thread.ident, SoftTimeLimitExceeded)
    thread.join(10)
    assert order == ["interrupted"]


def test_a_step_waiting_for_its_round_is_interrupted_before_the_round_ends(
    pool: ThreadSlotPool,
) -> None:
    recorder = Recorder()
    answer: Future[str] = Future()  # a call on the wire that answers only later

    def step() -> str:
        try:
            _wait_for_round([answer])
        except SoftTimeLimitExceeded:
            return "handed back while the round was on the wire" if not answer.done() else ""
        return "round ended"

    apply(pool, step, recorder)
    assert recorder.done.wait(10)
    answer.set_result("answer")
    assert recorder.kinds() == ["accepted", "soft", "result"]
    assert recorder.events[-1] == ("result", "handed back while the round was on the wire")


def test_a_task_past_its_soft_limit_is_interrupted_where_it_waits(pool: ThreadSlotPool) -> None:
    recorder = Recorder()

    def step() -> str:
        try:
            for _ in range(500):
                time.sleep(0.01)  # a step waiting in slices (the limiter, a round's answers)
        except SoftTimeLimitExceeded:
            return "handed back"
        return "finished"

    apply(pool, step, recorder)
    assert recorder.done.wait(5)
    assert recorder.kinds() == ["accepted", "soft", "result"]
    assert recorder.events[-1] == ("result", "handed back")


def test_a_stuck_task_is_given_up_at_its_hard_limit_and_the_process_restarts(
    pool: ThreadSlotPool,
) -> None:
    recorder = Recorder()
    given_up: list[int] = []
    hook = thread_pool.on_hard_limit(given_up.append)
    stuck = threading.Event()
    threads: list[int] = []

    def step() -> None:
        threads.append(threading.get_ident())
        stuck.wait()  # no timeout: no interruption lands here

    try:
        apply(pool, step, recorder)
        wait_for(lambda: "hard" in recorder.kinds())
        assert given_up == threads, "the hooks gave up what the stuck thread holds"
        assert recorder.kinds() == ["accepted", "soft", "hard"]
        # Still stuck llm_timeout_s (the settings' default, 20 s) later: not yet here; the
        # watch is asked directly with a later clock.
        [task] = pool.running()
        assert pool._watch is not None
        pool._watch.check(time.monotonic() + 60)
        assert pool.restarts == [  # type: ignore[attr-defined]
            "a task's thread is stuck 60s past its hard time limit (0.8s)"
        ]
        stuck.set()
        wait_for(lambda: not pool.running())
        assert "result" not in recorder.kinds(), "Celery was told it timed out, only that"
        assert task.thread == threads[0]
    finally:
        thread_pool._hard_limit_hooks.remove(hook)
        stuck.set()


def test_a_given_up_thread_that_wakes_is_abandoned_not_recorded(pool: ThreadSlotPool) -> None:
    recorder = Recorder()
    seen: list[str] = []

    def step() -> None:
        try:
            while True:
                time.sleep(0.01)
        except SoftTimeLimitExceeded:
            seen.append("soft")
            while True:  # a step that ignores its soft limit and keeps going
                time.sleep(0.01)
        except StepAbandoned:
            seen.append("abandoned")
            raise

    apply(pool, step, recorder)
    wait_for(lambda: "hard" in recorder.kinds() and not pool.running())
    assert recorder.kinds() == ["accepted", "soft", "hard"]
    assert seen == ["soft"]  # StepAbandoned raised in the handler, past the except clauses


def test_a_restart_hands_back_what_still_runs_after_the_soft_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(thread_pool, "restart_after_shutdown", lambda reason: None)
    monkeypatch.setenv("DOCPIPE_WORKER_SOFT_SHUTDOWN_S", "0.2")
    from docpipe.settings import get_settings

    get_settings.cache_clear()
    pool = ThreadSlotPool(limit=2, soft_timeout=30, timeout=60)
    pool.start()
    recorder = Recorder()

    def step() -> str:
        try:
            while True:
                time.sleep(0.01)
        except SoftTimeLimitExceeded:
            return "handed back"

    try:
        apply(pool, step, recorder)
        wait_for(lambda: "accepted" in recorder.kinds())
        pool.restart("testing")
        started = time.monotonic()
        pool.stop()
        assert time.monotonic() - started < 5
        assert recorder.events[-1] == ("result", "handed back")
    finally:
        get_settings.cache_clear()
