"""The limiter's two atomic Redis scripts (see docpipe.providers.limiter for the design).

KEYS: the provider's state hash (pause, breaker), its in-flight set, its interactive and
batch waiter sets, then one hash per bucket (requests or tokens, of the key or of a model).
A bucket hash holds ``rate`` (allowed now, per second: AIMD), ``tokens``, ``ts``,
``blocked_until``, ``stated`` (the per-minute limit the provider's headers stated) and the
times of the last decrease and increase. Clocks are Redis' own (TIME).
"""

from __future__ import annotations

__all__ = ["ACQUIRE", "RELEASE"]

# A bucket's capacity, allowed rate and tokens now, from its hash fields (rate, tokens, ts
# first) and its limit per minute.
_REFILL = """
local function refill(b, limit, cap, kind, now)
  local max_rate = limit / 60
  if cap <= 0 then cap = kind == 'r' and math.max(1, max_rate) or limit end
  local rate = math.min(tonumber(b[1]) or max_rate, max_rate)
  local tokens = tonumber(b[2]) or cap
  tokens = math.min(cap, tokens + math.max(0, now - (tonumber(b[3]) or now)) * rate)
  return cap, rate, tokens
end
"""

# ARGV: lane, slot ids (comma-separated: a round of calls asks for its slots at once), slot
# ttl, max concurrency, interactive reserve, waiter ttl, breaker failures, probe interval, n;
# then per bucket: limit per minute (0: the stated one, if any), capacity (0: one second's
# worth of requests, one minute's worth of tokens), kind ('r'/'t'), cost (of all the slots).
# Returns 'probe', '0' (granted) or the seconds to wait. Several slots are granted all
# together or not at all, and never as a probe; their caller does not count as a waiter
# (each call then asks for its own slot).
ACQUIRE = (
    _REFILL
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local lane, slots = ARGV[1], {}
for id in string.gmatch(ARGV[2], '[^,]+') do slots[#slots + 1] = id end
local slot, round = slots[1], #slots > 1
local slot_ttl, max_conc, reserve = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local waiter_ttl, breaker_failures = tonumber(ARGV[6]), tonumber(ARGV[7])
local probe_s, n = tonumber(ARGV[8]), tonumber(ARGV[9])
local wait_key = lane == 'batch' and KEYS[4] or KEYS[3]
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local st = redis.call('HMGET', KEYS[1], 'blocked_until', 'failures')
local blocked = tonumber(st[1]) or 0
local wait = 0
local buckets = {}
if now < blocked then
  wait = blocked - now
elseif (tonumber(st[2]) or 0) >= breaker_failures and round then
  wait = probe_s
elseif (tonumber(st[2]) or 0) >= breaker_failures then
  -- The circuit is open and its pause is over: this caller is the one probe; everyone
  -- else waits for its answer (a success closes the circuit, a failure pauses again).
  redis.call('HSET', KEYS[1], 'blocked_until', now + probe_s)
  redis.call('ZREM', wait_key, slot)
  redis.call('ZADD', KEYS[2], now + slot_ttl, slot)
  return 'probe'
else
  local conc_limit = max_conc
  if lane == 'batch' then
    conc_limit = math.max(1, math.floor(max_conc * (1 - reserve)))
    if redis.call('ZCARD', KEYS[3]) > 0 then wait = 0.05 end
  end
  if redis.call('ZCARD', KEYS[2]) + #slots > conc_limit then wait = math.max(wait, 0.05) end
  for i = 1, n do
    local a = 9 + (i - 1) * 4
    local per_min, cap = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local kind, cost = ARGV[a + 3], tonumber(ARGV[a + 4])
    local key = KEYS[4 + i]
    local b = redis.call('HMGET', key, 'rate', 'tokens', 'ts', 'blocked_until', 'stated')
    local bb = tonumber(b[4]) or 0
    if now < bb then wait = math.max(wait, bb - now) end
    local limit = per_min > 0 and per_min or (tonumber(b[5]) or 0)
    if limit > 0 then
      local rate, tokens
      cap, rate, tokens = refill(b, limit, cap, kind, now)
      -- A request larger than the bucket waits for a full one rather than forever (a round
      -- larger than the bucket asks call by call); batch calls leave the interactive
      -- reserve in every bucket.
      local floor = cost
      if not round then
        cost = math.min(cost, cap)
        floor = cost
        if lane == 'batch' then floor = math.min(cap, cost + cap * reserve) end
      elseif lane == 'batch' then
        floor = cost + cap * reserve
      end
      if tokens < floor then wait = math.max(wait, (floor - tokens) / rate) end
      buckets[#buckets + 1] = {key, rate, tokens, cost}
    end
  end
end
if wait > 0 then
  for _, b in ipairs(buckets) do
    redis.call('HSET', b[1], 'rate', b[2], 'tokens', b[3], 'ts', now)
  end
  if not round then redis.call('ZADD', wait_key, now + waiter_ttl, slot) end
  return tostring(wait)
end
for _, b in ipairs(buckets) do
  redis.call('HSET', b[1], 'rate', b[2], 'tokens', b[3] - b[4], 'ts', now)
end
for _, id in ipairs(slots) do
  redis.call('ZREM', wait_key, id)
  redis.call('ZADD', KEYS[2], now + slot_ttl, id)
end
return '0'
"""
)

# ARGV: slot id, outcome ('ok', 'rate_limited', 'unavailable', 'error', 'unused': a round's
# slot no call took), retry-after seconds,
# breaker failures, probe interval, decrease factor, recovery share per second, n; then per
# bucket: limit per minute, capacity, kind, correction (given back: estimated tokens - used;
# an unused slot's request and tokens),
# remaining, reset seconds and stated limit per minute from the headers (-1: not said).
RELEASE = (
    _REFILL
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local slot, outcome, retry_after = ARGV[1], ARGV[2], tonumber(ARGV[3])
local breaker_failures, probe_s = tonumber(ARGV[4]), tonumber(ARGV[5])
local factor, recovery, n = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
redis.call('ZREM', KEYS[2], slot)
local st = redis.call('HMGET', KEYS[1], 'blocked_until', 'failures')
if outcome == 'unavailable' then
  -- The provider is down, not busy: after a few failures in a row everyone waits and only
  -- a probe goes out every probe_s, instead of every step burning its retry attempts.
  local failures = (tonumber(st[2]) or 0) + 1
  redis.call('HSET', KEYS[1], 'failures', failures)
  if failures >= breaker_failures and now + probe_s > (tonumber(st[1]) or 0) then
    redis.call('HSET', KEYS[1], 'blocked_until', now + probe_s)
  end
  return tostring(failures)
end
if outcome == 'ok' then
  if (tonumber(st[2]) or 0) >= breaker_failures then
    redis.call('HSET', KEYS[1], 'blocked_until', 0)  -- the probe got through: resume at once
  end
  redis.call('HSET', KEYS[1], 'failures', 0)
elseif outcome == 'rate_limited' and retry_after > 0 then
  if now + retry_after > (tonumber(st[1]) or 0) then
    redis.call('HSET', KEYS[1], 'blocked_until', now + retry_after)
  end
end
for i = 1, n do
  local a = 8 + (i - 1) * 7
  local per_min, cap, kind = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), ARGV[a + 3]
  local correction, remaining = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local reset, stated = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local key = KEYS[2 + i]
  local b = redis.call('HMGET', key, 'rate', 'tokens', 'ts', 'last_decrease', 'last_increase',
                       'stated')
  local limit = per_min
  if limit <= 0 then
    if stated > 0 then redis.call('HSET', key, 'stated', stated) end
    limit = stated > 0 and stated or (tonumber(b[6]) or 0)
  end
  if limit > 0 then
    local max_rate = limit / 60
    local rate, tokens
    cap, rate, tokens = refill(b, limit, cap, kind, now)
    tokens = math.min(cap, tokens + correction)
    if outcome == 'ok' then
      -- Additive increase in time, not per call: a throttled-down rate sends few calls and
      -- would otherwise climb back slowest exactly when it is lowest.
      local since = math.max(0, now - (tonumber(b[5]) or now))
      rate = math.min(max_rate, rate + max_rate * recovery * since)
      redis.call('HSET', key, 'last_increase', now)
    elseif outcome == 'rate_limited' and now - (tonumber(b[4]) or 0) >= 1 then
      -- One burst of 429s from concurrent calls is one congestion signal, not many.
      rate = math.max(max_rate * 0.05, rate * factor)
      tokens = 0
      redis.call('HSET', key, 'last_decrease', now, 'last_increase', now)
    end
    -- The provider's own count wins when it has less left than we think.
    if remaining >= 0 then tokens = math.min(tokens, remaining) end
    redis.call('HSET', key, 'rate', rate, 'tokens', tokens, 'ts', now)
  elseif remaining == 0 and reset > 0 then
    -- No limit known, but the provider says nothing is left: wait until it resets.
    redis.call('HSET', key, 'blocked_until', now + reset)
  end
end
return 'ok'
"""
)
