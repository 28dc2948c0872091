"""The process' call threads: reused from call to call, and never a forked child's."""

from __future__ import annotations

import os
import threading

from docpipe.providers import call_threads as call_threads_module
from docpipe.providers.call_threads import CallThreads, call_threads


def test_a_call_after_an_answer_takes_the_idle_thread_instead_of_a_new_one() -> None:
    threads = CallThreads()
    first = threads.submit(threading.get_native_id).result(timeout=10)
    second = threads.submit(threading.get_native_id).result(timeout=10)
    assert (first, threads.started) == (second, 1)


def test_calls_at_once_each_start_at_once_in_a_thread_of_their_own() -> None:
    threads = CallThreads()
    all_in = threading.Barrier(3, timeout=10)  # would time out if one waited behind another
    futures = [threads.submit(all_in.wait) for _ in range(3)]
    assert sorted(f.result(timeout=10) for f in futures) == [0, 1, 2]
    assert threads.started == 3


def test_a_forked_child_starts_its_own_threads_not_its_parents() -> None:
    parents = call_threads()
    assert parents.submit(lambda: 1).result(timeout=10) == 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own set, which answers (the parent's threads are gone)
        ok = call_threads() is not parents and call_threads().submit(lambda: 2).result(5) == 2
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    assert call_threads_module.call_threads() is parents
