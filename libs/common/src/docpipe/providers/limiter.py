"""One provider limit for every worker of every queue, kept in Redis by atomic scripts.

- concurrency: calls in flight, each a member of a sorted set scored by its expiry, so a
  crashed worker's slot frees itself;
- rate: a token bucket refilled at the *allowed* rate (requests per second);
- priority: while an interactive call waits, batch calls wait too, and batch calls always
  leave ``limiter_interactive_reserve`` of the concurrency and of the bucket to interactive
  ones (the reserve costs batch no throughput: the bucket refills at the same rate);
- adaptive (AIMD): a 429 multiplies the allowed rate by ``limiter_decrease_factor`` (at most
  once per second), empties the bucket and pauses everyone for the provider's Retry-After;
  while calls succeed, the rate climbs back by ``limiter_recovery_per_s`` of the configured
  rate per second;
- a circuit breaker: after ``limiter_breaker_failures`` calls in a row found the provider
  down (connection errors, timeouts, 5xx), calls wait and a probe goes out every
  ``limiter_breaker_probe_s``; a caller that waited ``limiter_max_wait_s`` hands its step
  back without losing an attempt, so an outage delays runs instead of failing them.

Clocks come from Redis' TIME, so workers on different hosts agree. If Redis is unreachable
the limiter lets calls through (the broker is then down too, and the provider's own 429s
still slow us down) rather than failing work that is already running.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from docpipe.errors import TransientLLMError
from docpipe.observability import metrics
from docpipe.settings import Settings

__all__ = ["LimiterState", "ProviderLimiter"]

log = logging.getLogger(__name__)

# A waiter that stops polling (killed) stops counting as waiting after this long.
_WAITER_TTL_S = 2.0
_POLL_MAX_S = 0.25
# Failures that mean the provider is down or broken rather than busy (the client's kinds).
_UNAVAILABLE = frozenset({"connection", "timeout", "server_error", "bad_response"})

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local lane, slot, waiter = ARGV[1], ARGV[2], ARGV[3]
local slot_ttl, max_rate, burst = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local max_conc, reserve, waiter_ttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local breaker_failures, probe_s = tonumber(ARGV[10]), tonumber(ARGV[11])
local wait_key = lane == 'batch' and KEYS[4] or KEYS[3]
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local st = redis.call('HMGET', KEYS[1], 'rate', 'tokens', 'ts', 'blocked_until', 'failures')
local rate = math.min(tonumber(st[1]) or max_rate, max_rate)
local tokens = tonumber(st[2]) or burst
local ts = tonumber(st[3]) or now
local blocked = tonumber(st[4]) or 0
if max_rate > 0 then tokens = math.min(burst, tokens + math.max(0, now - ts) * rate) end
local wait = 0
if now < blocked then
  wait = blocked - now
elseif (tonumber(st[5]) or 0) >= breaker_failures then
  -- The circuit is open and its pause is over: this caller is the one probe; everyone
  -- else waits for its answer (a success closes the circuit, a failure pauses again).
  redis.call('HSET', KEYS[1], 'blocked_until', now + probe_s)
  redis.call('ZREM', wait_key, waiter)
  redis.call('ZADD', KEYS[2], now + slot_ttl, slot)
  return 'probe'
else
  local conc_limit, floor = max_conc, 1
  if lane == 'batch' then
    conc_limit = math.max(1, math.floor(max_conc * (1 - reserve)))
    floor = 1 + burst * reserve
    if redis.call('ZCARD', KEYS[3]) > 0 then wait = 0.05 end
  end
  if wait == 0 and redis.call('ZCARD', KEYS[2]) >= conc_limit then wait = 0.05 end
  if wait == 0 and max_rate > 0 and tokens < floor then wait = (floor - tokens) / rate end
end
if wait > 0 then
  redis.call('HSET', KEYS[1], 'rate', rate, 'tokens', tokens, 'ts', now)
  redis.call('ZADD', wait_key, now + waiter_ttl, waiter)
  return tostring(wait)
end
if max_rate > 0 then tokens = tokens - 1 end
redis.call('HSET', KEYS[1], 'rate', rate, 'tokens', tokens, 'ts', now)
redis.call('ZREM', wait_key, waiter)
redis.call('ZADD', KEYS[2], now + slot_ttl, slot)
return '0'
"""

_RELEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local slot, outcome, retry_after = ARGV[1], ARGV[2], tonumber(ARGV[3])
local max_rate, min_rate = tonumber(ARGV[4]), tonumber(ARGV[5])
local factor, step = tonumber(ARGV[6]), tonumber(ARGV[7])
local breaker_failures, probe_s = tonumber(ARGV[8]), tonumber(ARGV[9])
redis.call('ZREM', KEYS[2], slot)
local st = redis.call('HMGET', KEYS[1], 'rate', 'last_decrease', 'blocked_until',
                     'last_increase', 'failures')
if outcome == 'unavailable' then
  -- The provider is down, not busy: after a few failures in a row everyone waits and only
  -- a probe goes out every probe_s, instead of every step burning its retry attempts.
  local failures = (tonumber(st[5]) or 0) + 1
  redis.call('HSET', KEYS[1], 'failures', failures)
  if failures >= breaker_failures and now + probe_s > (tonumber(st[3]) or 0) then
    redis.call('HSET', KEYS[1], 'blocked_until', now + probe_s)
  end
  return tostring(failures)
end
if outcome == 'ok' then
  if (tonumber(st[5]) or 0) >= breaker_failures then
    redis.call('HSET', KEYS[1], 'blocked_until', 0)  -- the probe got through: resume at once
  end
  redis.call('HSET', KEYS[1], 'failures', 0)
end
if max_rate <= 0 then return '0' end
local rate = math.min(tonumber(st[1]) or max_rate, max_rate)
if outcome == 'ok' then
  -- Additive increase in time, not per call: a throttled-down rate sends few calls and
  -- would otherwise climb back slowest exactly when it is lowest.
  local since = math.max(0, now - (tonumber(st[4]) or now))
  rate = math.min(max_rate, rate + step * since)
  redis.call('HSET', KEYS[1], 'last_increase', now)
elseif outcome == 'rate_limited' then
  -- One burst of 429s from concurrent calls is one congestion signal, not many.
  if now - (tonumber(st[2]) or 0) >= 1 then
    rate = math.max(min_rate, rate * factor)
    redis.call('HSET', KEYS[1], 'last_decrease', now, 'last_increase', now, 'tokens', 0,
               'ts', now)
  end
  if retry_after > 0 and now + retry_after > (tonumber(st[3]) or 0) then
    redis.call('HSET', KEYS[1], 'blocked_until', now + retry_after)
  end
end
redis.call('HSET', KEYS[1], 'rate', rate)
return tostring(rate)
"""


@dataclass(frozen=True)
class LimiterState:
    allowed_rpm: float
    configured_rpm: int
    in_flight: int
    waiting_interactive: int
    waiting_batch: int


class ProviderLimiter:
    """The gate every provider call passes through (see docpipe.providers.calls.CallGate)."""

    def __init__(self, client: redis.Redis, settings: Settings, *, name: str = "provider") -> None:
        self._redis = client
        self._settings = settings
        prefix = f"docpipe:limiter:{{{name}}}"
        self._keys = [f"{prefix}:state", f"{prefix}:inflight", f"{prefix}:waiting:interactive",
                      f"{prefix}:waiting:batch"]  # fmt: skip
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)
        self._max_rate = settings.provider_rpm / 60
        self._burst = settings.provider_burst or max(1, settings.provider_rpm // 60)
        # A slot outlives the longest call by a margin; a crashed holder frees it then.
        self._slot_ttl = settings.llm_timeout_s + 5

    @contextmanager
    def slot(self, model: str, lane: str) -> Iterator[None]:
        """Hold a provider slot for one call; a 429 inside slows every worker down."""
        slot_id = uuid.uuid4().hex
        asked = time.monotonic()
        try:
            granted = self._wait_for_slot(slot_id, lane)
        finally:
            metrics.observe_limiter_wait(lane, time.monotonic() - asked)
        outcome, retry_after = "error", 0.0
        try:
            yield
            outcome = "ok"
        except TransientLLMError as exc:
            if exc.kind == "rate_limited":
                outcome, retry_after = "rate_limited", exc.retry_after or 0.0
            elif exc.kind in _UNAVAILABLE:
                outcome = "unavailable"
                # A failed probe says the provider is still down, nothing about this step.
                exc.counts_as_attempt = granted != "probe"
            raise
        finally:
            if granted:
                self._report(slot_id, outcome, retry_after)

    def _wait_for_slot(self, slot_id: str, lane: str) -> str:
        """'slot' or 'probe' when granted, '' when Redis is unreachable (no limit applies);
        raises TransientLLMError(kind="throttled") after limiter_max_wait_s."""
        deadline = time.monotonic() + self._settings.limiter_max_wait_s
        s = self._settings
        while True:
            try:
                answer = self._acquire(keys=self._keys, args=[
                    lane, slot_id, slot_id, self._slot_ttl, self._max_rate, self._burst,
                    s.provider_max_concurrency, s.limiter_interactive_reserve, _WAITER_TTL_S,
                    s.limiter_breaker_failures, s.limiter_breaker_probe_s,
                ])  # fmt: skip
            except redis.RedisError as exc:
                # One line per call: during an outage every call says it.
                log.warning("provider limiter unavailable; calling without it (%s: %s)",
                            type(exc).__name__, exc)  # fmt: skip
                return ""
            if answer in (b"probe", "probe"):
                return "probe"
            wait = float(answer)
            if wait <= 0:
                return "slot"
            if time.monotonic() + wait > deadline:
                # Stop counting as a waiter at once: a ghost interactive waiter holds back
                # every batch call.
                waiting = self._keys[3] if lane == "batch" else self._keys[2]
                with contextlib.suppress(redis.RedisError):
                    self._redis.zrem(waiting, slot_id)
                raise TransientLLMError(
                    f"provider limit: no slot within {s.limiter_max_wait_s:g}s",
                    kind="throttled",
                    retry_after=wait,
                )
            # Jitter keeps waiters from polling Redis in lockstep.
            time.sleep(min(wait, _POLL_MAX_S) * random.uniform(0.8, 1.2))

    def _report(self, slot_id: str, outcome: str, retry_after: float) -> None:
        s = self._settings
        try:
            self._release(keys=self._keys, args=[
                slot_id, outcome, retry_after, self._max_rate,
                self._max_rate * 0.05, s.limiter_decrease_factor,
                self._max_rate * s.limiter_recovery_per_s,
                s.limiter_breaker_failures, s.limiter_breaker_probe_s,
            ])  # fmt: skip
        except redis.RedisError:
            log.warning("provider limiter unavailable; slot %s expires on its own", slot_id)

    def state(self) -> LimiterState:
        """What the limiter allows now and who waits (for metrics and status pages)."""
        now = time.time()
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.hget(self._keys[0], "rate")
            pipe.zcount(self._keys[1], now, "+inf")
            pipe.zcount(self._keys[2], now, "+inf")
            pipe.zcount(self._keys[3], now, "+inf")
            rate, in_flight, waiting_i, waiting_b = pipe.execute()
        allowed = float(rate) if rate is not None else self._max_rate
        return LimiterState(
            allowed_rpm=allowed * 60,
            configured_rpm=self._settings.provider_rpm,
            in_flight=int(in_flight),
            waiting_interactive=int(waiting_i),
            waiting_batch=int(waiting_b),
        )
