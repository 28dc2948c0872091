"""The shared provider limiter against real Redis: several limiter objects stand for
several worker processes, as they share nothing but Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest
import redis

from docpipe.broker.transport import redis_client
from docpipe.errors import TransientLLMError
from docpipe.providers.client import Completion
from docpipe.providers.limiter import CallTicket, ProviderLimiter
from docpipe.settings import Settings
from docpipe_dev.localstack import LocalRedis
from tests.support.factories import script_calls
from tests.support.processes import wait_until

MODEL = "gpt-4o-mini"


def limiter(broker: redis.Redis, **overrides: object) -> ProviderLimiter:
    settings = Settings(**{"provider_rpm": 0, "limiter_max_wait_s": 5.0, **overrides})  # type: ignore[arg-type]
    return ProviderLimiter(broker, settings)


@pytest.fixture
def client(broker: redis.Redis, redis_server: LocalRedis) -> Iterator[redis.Redis]:
    """A client as a worker makes it (used from several threads here), fully closed
    afterwards."""
    own = redis_client(Settings(redis_url=redis_server.url))
    yield own
    own.connection_pool.disconnect()


def test_concurrency_is_capped_across_processes(client: redis.Redis) -> None:
    workers = [limiter(client, provider_max_concurrency=3) for _ in range(4)]
    in_flight = 0
    peak = 0
    lock = threading.Lock()
    release = threading.Event()

    def call(gate: ProviderLimiter) -> None:
        nonlocal in_flight, peak
        with gate.slot(MODEL, "interactive"):
            with lock:
                in_flight += 1
                peak = max(peak, in_flight)
            release.wait(timeout=30)
            with lock:
                in_flight -= 1

    def three_hold_and_thirteen_wait() -> bool:
        state = workers[0].state()
        return (in_flight, state.in_flight, state.waiting_interactive) == (3, 3, 13)

    threads = [threading.Thread(target=call, args=(workers[i % 4],)) for i in range(16)]
    for t in threads:
        t.start()
    try:
        wait_until(three_hold_and_thirteen_wait, timeout_s=10, every_s=0.01)
    finally:
        release.set()
        for t in threads:
            t.join()
    assert peak == 3


def test_hundreds_of_threads_of_two_processes_stay_within_the_limits(
    client: redis.Redis,
) -> None:
    """Two threads workers of 200 slots each, every slot calling at once: never more calls
    than max_concurrency hold a slot, no more than the bucket allows start, every call gets
    through, and no slot is left held."""
    gates = [
        limiter(client, provider_max_concurrency=25, provider_rpm=12_000, provider_burst=50)
        for _ in range(2)
    ]  # 200/s after a burst of 50
    in_flight = peak = done = 0
    lock = threading.Lock()
    started = time.monotonic()

    def call(gate: ProviderLimiter) -> None:
        nonlocal in_flight, peak, done
        with gate.slot(MODEL, "batch"):
            with lock:
                in_flight += 1
                peak = max(peak, in_flight)
            time.sleep(0.02)  # holds the slot so calls overlap: the peak measured is the point
            with lock:
                in_flight -= 1
                done += 1

    threads = [threading.Thread(target=call, args=(gates[i % 2],)) for i in range(400)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    assert done == 400
    assert peak <= 25
    assert elapsed >= (400 - 50) / 200, "the bucket let more through than its rate"
    assert gates[0].state().in_flight == 0


def test_the_rate_is_a_shared_token_bucket(client: redis.Redis) -> None:
    gates = [limiter(client, provider_rpm=1200, provider_burst=1) for _ in range(3)]  # 20/s
    started = time.monotonic()
    threads = [
        threading.Thread(
            target=lambda g=g: [g.slot(MODEL, "interactive").__enter__() for _ in range(10)]
        )
        for g in gates
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    # 30 calls at 20/s with a bucket of 1: at least 29/20 s, whatever the number of callers.
    assert elapsed >= 1.4


def test_interactive_calls_go_before_waiting_batch_calls(client: redis.Redis) -> None:
    gate = limiter(client, provider_max_concurrency=1, limiter_interactive_reserve=0.0)
    order: list[str] = []
    holder = gate.slot(MODEL, "interactive")
    holder.__enter__()  # the only slot is taken

    def call(lane: str) -> None:
        with gate.slot(MODEL, lane):
            order.append(lane)

    batch = [threading.Thread(target=call, args=("batch",)) for _ in range(3)]
    for t in batch:
        t.start()
    wait_until(lambda: gate.state().waiting_batch == 3, timeout_s=10, every_s=0.01)
    interactive = threading.Thread(target=call, args=("interactive",))
    interactive.start()
    wait_until(lambda: gate.state().waiting_interactive == 1, timeout_s=10, every_s=0.01)
    holder.__exit__(None, None, None)
    for t in [*batch, interactive]:
        t.join()
    assert order[0] == "interactive"
    assert sorted(order) == ["batch", "batch", "batch", "interactive"]


def test_batch_leaves_a_reserve_of_concurrency_to_interactive_calls(client: redis.Redis) -> None:
    gate = limiter(
        client, provider_max_concurrency=4, limiter_interactive_reserve=0.25, limiter_max_wait_s=0.3
    )
    held = [gate.slot(MODEL, "batch") for _ in range(3)]
    for slot in held:
        slot.__enter__()
    with pytest.raises(TransientLLMError) as caught, gate.slot(MODEL, "batch"):
        pass
    assert caught.value.kind == "throttled"
    with gate.slot(MODEL, "interactive"):  # the reserved fourth slot
        pass


def test_a_429_halves_the_rate_pauses_everyone_and_success_brings_it_back(
    client: redis.Redis,
) -> None:
    gate = limiter(client, provider_rpm=600, limiter_recovery_per_s=0.25)
    assert gate.state().allowed_rpm == pytest.approx(600)
    with pytest.raises(TransientLLMError), gate.slot(MODEL, "batch"):
        raise TransientLLMError("429", kind="rate_limited", retry_after=0.5)
    assert gate.state().allowed_rpm == pytest.approx(300)
    started = time.monotonic()
    with gate.slot(MODEL, "interactive"):
        pass
    assert time.monotonic() - started >= 0.4, "everyone waits out the Retry-After"
    # While calls succeed, a quarter of the configured rate comes back per second.
    partly = gate.state().allowed_rpm
    assert 300 < partly < 600

    def recovered() -> bool:
        with gate.slot(MODEL, "interactive"):
            pass
        return gate.state().allowed_rpm == pytest.approx(600)

    wait_until(recovered, timeout_s=10, every_s=0.1)  # a quarter a second: 2 s at least


def test_concurrent_429s_are_one_congestion_signal(client: redis.Redis) -> None:
    gate = limiter(client, provider_rpm=600)
    slots = [gate.slot(MODEL, "interactive") for _ in range(5)]
    for slot in slots:  # five calls in flight together ...
        slot.__enter__()
    for slot in slots:  # ... all answered 429
        error = TransientLLMError("429", kind="rate_limited", retry_after=0.01)
        assert slot.__exit__(type(error), error, None) is False  # re-raised to the caller
    assert gate.state().allowed_rpm == pytest.approx(300)


def test_a_caller_that_cannot_get_a_slot_in_time_gives_up_transiently(
    client: redis.Redis,
) -> None:
    gate = limiter(client, provider_max_concurrency=1, limiter_max_wait_s=0.3)
    holder = gate.slot(MODEL, "interactive")
    holder.__enter__()
    with pytest.raises(TransientLLMError) as caught, gate.slot(MODEL, "interactive"):
        pass
    assert caught.value.kind == "throttled"
    state = gate.state()
    assert (state.in_flight, state.waiting_interactive) == (1, 0), "it stopped waiting at once"
    holder.__exit__(None, None, None)
    assert gate.state().in_flight == 0
    # No ghost interactive waiter holds batch calls back (it would, for _WAITER_TTL_S = 2 s,
    # longer than this limiter lets a caller wait): the free slot is granted at once.
    with gate.slot(MODEL, "batch"):
        assert gate.state().in_flight == 1


def test_a_crashed_holder_frees_its_slot_after_the_slot_ttl(client: redis.Redis) -> None:
    gate = limiter(
        client,
        provider_max_concurrency=1,
        llm_timeout_s=0.5,
        task_soft_time_limit_s=10.0,
        limiter_max_wait_s=8.0,
        database_statement_timeout_s=5.0,
        database_socket_timeout_s=5.0,
        database_pool_timeout_s=5.0,
        webhook_timeout_s=5.0,
    )
    crashed = gate.slot(MODEL, "interactive")
    crashed.__enter__()  # never released: its worker died
    started = time.monotonic()
    with gate.slot(MODEL, "interactive"):
        pass
    assert 4 <= time.monotonic() - started <= 7.5
    del crashed


def test_without_redis_calls_are_let_through_at_once_and_say_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    gate = limiter(dead, limiter_max_wait_s=5.0)
    sent = []
    started = time.monotonic()
    with (
        caplog.at_level("WARNING", logger="docpipe.providers.limiter"),
        gate.slot(MODEL, "interactive"),
    ):
        sent.append("call")
    # Let through without waiting for a slot it can never get (nor for limiter_max_wait_s).
    assert sent == ["call"]
    assert time.monotonic() - started < 5.0
    assert "provider limiter unavailable; calling without it" in caplog.text


def entered(slot: AbstractContextManager[CallTicket]) -> AbstractContextManager[CallTicket] | None:
    """``slot`` taken, or None while the limiter makes its caller wait (throttled)."""
    try:
        slot.__enter__()
    except TransientLLMError as refused:
        if refused.kind != "throttled":
            raise
        return None
    return slot


def fail_with(gate: ProviderLimiter, kind: str) -> TransientLLMError:
    error = TransientLLMError("down", kind=kind)
    with pytest.raises(TransientLLMError), gate.slot(MODEL, "interactive"):
        raise error
    return error


def test_a_provider_outage_opens_the_breaker_and_probes_go_out_one_at_a_time(
    client: redis.Redis,
) -> None:
    gate = limiter(
        client, limiter_breaker_failures=3, limiter_breaker_probe_s=0.5, limiter_max_wait_s=0.2
    )
    for _ in range(3):  # three calls in a row find the provider down: they count
        assert fail_with(gate, "connection").counts_as_attempt
    with pytest.raises(TransientLLMError) as caught, gate.slot(MODEL, "interactive"):
        pass
    assert caught.value.kind == "throttled", "everyone waits while the breaker is open"
    # Once the pause is over, exactly one caller is let through as the probe ...
    probe = wait_until(lambda: entered(gate.slot(MODEL, "interactive")), timeout_s=10)
    with pytest.raises(TransientLLMError) as waiting, gate.slot(MODEL, "batch"):
        pass
    assert waiting.value.kind == "throttled"
    # ... and its failure is the provider's, not its step's.
    still_down = TransientLLMError("down", kind="timeout")
    assert probe.__exit__(type(still_down), still_down, None) is False
    assert not still_down.counts_as_attempt
    # The next probe, after the next pause, succeeds: the breaker closes.
    next_probe = wait_until(lambda: entered(gate.slot(MODEL, "interactive")), timeout_s=10)
    next_probe.__exit__(None, None, None)
    with gate.slot(MODEL, "batch"), gate.slot(MODEL, "interactive"):
        pass


def answered(tokens_used: int, **rate_limits: float) -> Completion:
    return Completion(
        content="{}",
        model=MODEL,
        input_tokens=tokens_used,
        output_tokens=0,
        latency_s=0.01,
        http_status=200,
        rate_limits=rate_limits,
    )


def test_a_tokens_per_minute_bucket_paces_calls_once_its_minute_is_spent(
    client: redis.Redis,
) -> None:
    gate = limiter(client, provider_tpm=6000, default_max_tokens=100)  # 100 tokens/s
    started = time.monotonic()
    for _ in range(60):  # a minute's worth at once ...
        with gate.slot(MODEL, "interactive", 100) as ticket:
            ticket.completion = answered(100)
    assert time.monotonic() - started < 1.0
    for _ in range(2):  # ... then one call of 100 tokens per second
        with gate.slot(MODEL, "interactive", 100) as ticket:
            ticket.completion = answered(100)
    assert time.monotonic() - started >= 1.8


def test_tokens_reserved_but_not_used_are_given_back_from_the_usage(client: redis.Redis) -> None:
    gate = limiter(client, provider_tpm=6000, default_max_tokens=100, limiter_max_wait_s=0.5)
    with gate.slot(MODEL, "interactive", 6000) as ticket:  # the estimate takes everything
        ticket.completion = answered(100)  # the answer used 100
    started = time.monotonic()
    with gate.slot(MODEL, "interactive", 3000):
        pass
    assert time.monotonic() - started < 0.5


def test_the_providers_headers_state_the_limit_and_what_is_left_before_any_429(
    client: redis.Redis,
) -> None:
    gate = limiter(client, limiter_max_wait_s=5.0)  # no limit configured at all
    with gate.slot(MODEL, "interactive", 50) as ticket:
        ticket.completion = answered(
            50,
            limit_requests=60,
            remaining_requests=0,
            limit_tokens=60_000,
            remaining_tokens=59_000,
        )
    (requests,) = [b for b in gate.bucket_states() if b.kind == "requests"]
    assert (requests.model, requests.limit_per_min) == (MODEL, 60)
    started = time.monotonic()
    with gate.slot(MODEL, "interactive", 50):  # nothing left: the next request in a second
        pass
    assert 0.8 <= time.monotonic() - started <= 3.0


def test_a_provider_with_nothing_left_and_no_stated_limit_is_waited_out_until_its_reset(
    client: redis.Redis,
) -> None:
    gate = limiter(client, limiter_max_wait_s=5.0)
    with gate.slot(MODEL, "interactive", 50) as ticket:
        ticket.completion = answered(50, remaining_tokens=0, reset_tokens_s=1.0)
    started = time.monotonic()
    with gate.slot(MODEL, "interactive", 50):
        pass
    assert time.monotonic() - started >= 0.8
    with gate.slot("gpt-4o", "interactive", 50):  # another model's buckets are its own
        pass


def test_a_round_gets_all_its_slots_at_once_or_none_and_is_no_waiter(client: redis.Redis) -> None:
    gate = limiter(client, provider_max_concurrency=3, limiter_max_wait_s=0.3)
    assert gate.reserve(MODEL, "interactive", [1, 1, 1, 1]) == []
    assert gate.state().in_flight == gate.state().waiting_interactive == 0
    slots = gate.reserve(MODEL, "interactive", [1, 1, 1])
    assert len(slots) == 3 and gate.state().in_flight == 3
    with pytest.raises(TransientLLMError), gate.slot(MODEL, "interactive"):
        pass  # the round holds every slot
    for slot in slots:
        with gate.slot(MODEL, "interactive", reserved=slot):
            pass
    assert gate.state().in_flight == 0


def test_a_reserved_slot_no_call_took_gives_its_request_and_tokens_back(
    client: redis.Redis,
) -> None:
    # Two requests a second and 6,000 tokens a minute: one round of two takes them all.
    gate = limiter(client, provider_rpm=120, provider_tpm=6000, default_max_tokens=100)
    first = gate.reserve(MODEL, "interactive", [3000, 3000])
    assert len(first) == 2
    assert gate.reserve(MODEL, "interactive", [1, 1]) == []  # nothing left for another
    for slot in first:
        gate.unreserve(MODEL, slot, 3000)
    assert gate.state().in_flight == 0
    assert len(gate.reserve(MODEL, "interactive", [3000, 3000])) == 2


def test_a_round_larger_than_a_full_bucket_is_not_asked_for_at_once(client: redis.Redis) -> None:
    gate = limiter(client, provider_rpm=60)  # a request a second: the bucket holds one
    before = script_calls(client)
    assert gate.reserve(MODEL, "interactive", [1, 1]) == []
    assert script_calls(client) == before
    with gate.slot(MODEL, "interactive"):  # each call asks on its own, as before
        pass
