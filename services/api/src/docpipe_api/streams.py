"""Open event streams per API key, counted across every API process.

Each open stream holds a slot: a member of a sorted set in Redis per key, scored by when it
lapses. The stream renews its slot while it runs and gives it back when it ends; a slot of a
process that died lapses by itself after SLOT_TTL_S. Opening is one script: drop lapsed
slots, count, add (Redis' own clock, so API pods with skewed clocks agree).

While Redis is down each process counts its own streams against the same cap: the cap is
then per process rather than per deployment, which still bounds what one key can hold open.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field

import redis

__all__ = ["SLOT_TTL_S", "StreamSlot", "StreamSlots"]

log = logging.getLogger(__name__)

# A slot not renewed for this long belongs to a stream whose process is gone.
SLOT_TTL_S = 30

_OPEN = """
local now = redis.call('TIME')
local now_s = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_s)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now_s + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) * 2)
return 1
"""
_RENEW = """
local now = redis.call('TIME')
local now_s = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZADD', KEYS[1], 'XX', now_s + tonumber(ARGV[1]), ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1])) * 2)
return 1
"""


@dataclass(frozen=True)
class StreamSlot:
    subject: str  # "key:<id>", or "tenant:<id>" without API keys
    token: str
    local: bool  # counted by this process only (Redis was down when it opened)


@dataclass
class StreamSlots:
    """The open-stream slots of one API process' clients."""

    client: redis.Redis
    limit: int
    _local: dict[str, set[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, subject: str) -> StreamSlot | None:
        """A slot for one more stream of ``subject``; None when it has ``limit`` open."""
        token = uuid.uuid4().hex
        try:
            opened = self.client.eval(_OPEN, 1, _key(subject), self.limit, SLOT_TTL_S, token)
        except redis.RedisError as exc:
            log.warning("open streams counted per process (Redis: %s)", type(exc).__name__)
            with self._lock:
                held = self._local.setdefault(subject, set())
                if len(held) >= self.limit:
                    return None
                held.add(token)
            return StreamSlot(subject, token, local=True)
        return StreamSlot(subject, token, local=False) if opened else None

    def renew(self, slot: StreamSlot) -> None:
        """Keep ``slot`` from lapsing for another SLOT_TTL_S (best effort)."""
        if slot.local:
            return
        try:
            self.client.eval(_RENEW, 1, _key(slot.subject), SLOT_TTL_S, slot.token)
        except redis.RedisError as exc:
            log.warning("stream slot not renewed (Redis: %s)", type(exc).__name__)

    def close(self, slot: StreamSlot) -> None:
        """Give ``slot`` back (best effort: a slot left in Redis lapses by itself)."""
        if slot.local:
            with self._lock:
                self._local.get(slot.subject, set()).discard(slot.token)
            return
        try:
            self.client.zrem(_key(slot.subject), slot.token)
        except redis.RedisError as exc:
            log.warning("stream slot not given back (Redis: %s)", type(exc).__name__)


def _key(subject: str) -> str:
    return f"docpipe:api-streams:{subject}"
