import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from docpipe.backoff import retry_delay

BASE, CAP = 0.5, 30.0


@given(attempt=st.integers(1, 200), seed=st.integers(0, 2**32))
def test_delay_stays_within_the_full_jitter_window(attempt: int, seed: int) -> None:
    delay = retry_delay(attempt, base_s=BASE, cap_s=CAP, rng=random.Random(seed))
    assert 0 <= delay <= min(CAP, BASE * 2 ** (attempt - 1))


@given(attempt=st.integers(1, 50), retry_after=st.floats(0, 20), seed=st.integers(0, 2**32))
def test_retry_after_is_a_floor(attempt: int, retry_after: float, seed: int) -> None:
    delay = retry_delay(
        attempt, base_s=BASE, cap_s=CAP, retry_after_s=retry_after, rng=random.Random(seed)
    )
    assert retry_after <= delay <= max(CAP, retry_after + CAP)


@given(seed=st.integers(0, 2**32))
def test_delays_grow_with_attempts_and_are_jittered(seed: int) -> None:
    rng = random.Random(seed)
    means = []
    for attempt in (1, 2, 3, 4, 5):
        samples = [retry_delay(attempt, base_s=BASE, cap_s=CAP, rng=rng) for _ in range(400)]
        assert len(set(samples)) > 350, "delays must be spread, not one value"
        means.append(statistics.fmean(samples))
    assert means == sorted(means)
    assert means[-1] > 4 * means[0]


def test_a_provider_retry_after_above_the_cap_is_honoured_exactly() -> None:
    assert retry_delay(1, base_s=BASE, cap_s=CAP, retry_after_s=120) == 120


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        retry_delay(0, base_s=BASE, cap_s=CAP)
