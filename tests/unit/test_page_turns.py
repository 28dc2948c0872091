"""A worker process reads at most DOCPIPE_WORKER_PAGE_READS pages at once
(docpipe.worker.text_extraction): in a threads pool, the other steps reading documents wait
for a turn, and one that gets none within its time is told so (and hands its step back)."""

from __future__ import annotations

import threading
import time

from docpipe.worker.text_extraction import _page_turn

LONG_S = 60.0


def test_turns_are_bounded_and_a_step_without_one_by_its_deadline_is_told() -> None:
    held = threading.Barrier(3)  # two readers holding their turn, and the test
    release = threading.Event()
    got: list[bool] = []

    def reader() -> None:
        with _page_turn(2, time.monotonic() + LONG_S) as turn:
            got.append(turn)
            held.wait(timeout=LONG_S)
            release.wait(timeout=LONG_S)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in readers:
        thread.start()
    held.wait(timeout=LONG_S)
    # Both turns taken: a third step whose time is up gets none.
    with _page_turn(2, time.monotonic() + 0.2) as turn:
        assert turn is False
    release.set()
    for thread in readers:
        thread.join(timeout=LONG_S)
    assert got == [True, True]
    # The turns were given back: the next step gets one at once.
    with _page_turn(2, time.monotonic()) as turn:
        assert turn is True


def test_a_turn_is_given_back_when_the_read_fails() -> None:
    for _ in range(3):
        try:
            with _page_turn(1, time.monotonic()) as turn:
                assert turn is True
                raise ValueError("the page could not be read")
        except ValueError:
            pass
    with _page_turn(1, time.monotonic()) as turn:
        assert turn is True
