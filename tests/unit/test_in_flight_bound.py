"""What one batch allows its slots (bench.in_flight.batch_bound): the ideal less the slots
its last wave leaves empty, against which a run of bench.in_flight is read."""

from __future__ import annotations

import pytest

from bench.in_flight import batch_bound


def test_whole_waves_of_equal_documents_reach_the_ideal() -> None:
    # 8 documents of 5 rounds at 2 s on 4 slots: two waves of 10 s, 0.4 documents/s.
    assert batch_bound([5] * 8, slots=4, latency_s=2.0) == pytest.approx(8 / 20)


def test_a_last_wave_half_full_costs_a_whole_wave() -> None:
    # 10 documents on 4 slots: the third wave runs 2 documents while 2 slots wait.
    assert batch_bound([5] * 10, slots=4, latency_s=2.0) == pytest.approx(10 / 30)


def test_documents_start_in_order_as_slots_free_up() -> None:
    # One slot runs 6 rounds, the other 2, 3 and 1: the last document starts at 6, ends at 7.
    assert batch_bound([6, 2, 3, 1, 1], slots=2, latency_s=1.0) == pytest.approx(5 / 7)


def test_more_slots_than_documents_end_with_the_longest_document() -> None:
    assert batch_bound([3, 7, 5], slots=10, latency_s=2.0) == pytest.approx(3 / 14)


def test_no_documents_allow_nothing() -> None:
    assert batch_bound([], slots=4, latency_s=2.0) == 0.0
