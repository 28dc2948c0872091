"""Provider limits for every worker of every queue, kept in Redis by atomic scripts.

Per provider (an endpoint and its key):

- concurrency: calls in flight, each a member of a sorted set scored by its expiry, so a
  crashed worker's slot frees itself;
- buckets: requests per minute and tokens per minute, of the key (all its models) and of
  each model, each a token bucket refilled at its *allowed* rate. A call takes one request
  and its estimated tokens (docpipe.providers.client) from each; once answered, the tokens
  bucket is corrected from the ``usage`` the provider reports;
- the provider's headers: ``x-ratelimit-remaining-*`` lower a model's buckets to what the
  provider says is left (before a 429 happens), ``x-ratelimit-limit-*`` give a model whose
  limits are not configured the limits the provider states, and a ``remaining`` of 0 under
  no known limit pauses that bucket until ``x-ratelimit-reset-*``;
- priority: while an interactive call waits for a model, batch calls to that model wait too
  (those to another model, whose limits have room, go on), and batch calls always
  leave ``limiter_interactive_reserve`` of the concurrency and of every bucket to
  interactive ones (the reserve costs batch no throughput: the buckets refill at the same
  rate);
- adaptive (AIMD), per bucket: a 429 multiplies the allowed rate of the call's buckets by
  ``limiter_decrease_factor`` (at most once per second), empties them and pauses the
  provider for its Retry-After (``retry-after-ms`` first); while calls succeed, the rate
  climbs back by ``limiter_recovery_per_s`` of the limit per second;
- a circuit breaker: after ``limiter_breaker_failures`` calls in a row found the provider
  down (connection errors, timeouts, 5xx), calls wait and a probe goes out every
  ``limiter_breaker_probe_s``; a caller that waited ``limiter_max_wait_s`` hands its step
  back without losing an attempt, so an outage delays runs instead of failing them;
- rounds: a step's round of parallel calls asks once for all its slots (``reserve``), granted
  together when the limits have room for the whole round, else each call asks on its own
  and waits its turn; a slot no call took is given back with its request and tokens.

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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

import redis

from docpipe.errors import LLMError, TransientLLMError
from docpipe.observability import metrics
from docpipe.providers.client import Completion
from docpipe.providers.limiter_scripts import ACQUIRE, RELEASE
from docpipe.settings import Settings
from docpipe.settings.provider_specs import ResolvedModel, ResolvedProvider

__all__ = ["BucketState", "CallGate", "CallTicket", "LimiterState", "ProviderLimiter", "no_gate"]

log = logging.getLogger(__name__)

# A waiter that stops polling (killed) stops counting as waiting after this long.
_WAITER_TTL_S = 2.0
_POLL_MAX_S = 0.25
# Failures that mean the provider is down or broken rather than busy (the client's kinds).
_UNAVAILABLE = frozenset({"connection", "timeout", "server_error", "bad_response"})


# The gate: the seam between a provider call and the limit it must respect.
# ProviderLimiter plugs in here; tests and tools may call without any (no_gate).


class CallTicket:
    """Held while a request is in flight; the caller puts the answer on it, so that the gate
    learns the tokens really used and what the provider's headers said."""

    def __init__(self) -> None:
        self.completion: Completion | None = None


class CallGate(Protocol):
    def slot(
        self, model: str, lane: str, tokens: int = 1, reserved: str | None = None
    ) -> AbstractContextManager[CallTicket]:
        """Held while a request estimated at ``tokens`` is in flight; ``reserved``: a slot
        :meth:`reserve` granted, taken without asking again."""

    def reserve(self, model: str, lane: str, tokens: Sequence[int]) -> list[str]:
        """Slots for a round of calls (one per estimate in ``tokens``) in one exchange, all
        of them or none; a call without one asks for its own."""

    def unreserve(self, model: str, slot: str, tokens: int) -> None:
        """Give back a reserved slot that no call took."""


class _NoGate:
    """No limit: every call goes at once."""

    @contextmanager
    def slot(
        self, model: str, lane: str, tokens: int = 1, reserved: str | None = None
    ) -> Iterator[CallTicket]:
        yield CallTicket()

    def reserve(self, model: str, lane: str, tokens: Sequence[int]) -> list[str]:
        return []

    def unreserve(self, model: str, slot: str, tokens: int) -> None:
        pass


no_gate: CallGate = _NoGate()


@dataclass(frozen=True)
class _Bucket:
    key: str
    limit_per_min: int  # 0: the limit the provider states, if any
    capacity: int  # 0: one second's worth of requests, one minute's worth of tokens
    kind: str  # 'r' (requests) or 't' (tokens)
    model_level: bool  # the provider's headers speak of the model's limits

    def cost(self, tokens: Sequence[int]) -> int:
        """What calls estimated at ``tokens`` take from the bucket: a request or their
        tokens each."""
        return sum(tokens) if self.kind == "t" else len(tokens)

    def size(self) -> float:
        """How much the bucket holds when full, as the scripts count it (0: no configured
        limit, so not known here)."""
        if self.limit_per_min <= 0:
            return 0
        if self.capacity > 0:
            return self.capacity
        return max(1, self.limit_per_min / 60) if self.kind == "r" else self.limit_per_min


@dataclass(frozen=True)
class BucketState:
    provider: str
    model: str  # "*" for the key's buckets, shared by all its models
    kind: str  # "requests" or "tokens"
    allowed_per_min: float
    limit_per_min: float  # configured, else stated by the provider (0: none known)


@dataclass(frozen=True)
class LimiterState:
    allowed_rpm: float
    configured_rpm: int
    in_flight: int
    waiting_interactive: int
    waiting_batch: int


class ProviderLimiter:
    """The gate every provider call passes through (see CallGate above)."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self._redis = client
        self._settings = settings
        table = settings.provider_table
        self._models = dict(table.models)
        self._providers = {p.name: p for p in table.providers}
        self._acquire = client.register_script(ACQUIRE)
        self._release = client.register_script(RELEASE)
        # A slot outlives the longest call by a margin; a crashed holder frees it then.
        self._slot_ttl = settings.llm_timeout_s + 5

    @staticmethod
    def _prefix(provider: str) -> str:
        # One hash tag per provider: every key a script touches is in one cluster slot.
        return f"docpipe:limiter:{{{provider}}}"

    def _keys(self, provider: str, model: str) -> list[str]:
        # Waiters per model: an interactive call waiting for one model's limit holds back
        # batch calls to that model, not to another model whose limit has room.
        prefix = self._prefix(provider)
        return [
            f"{prefix}:state",
            f"{prefix}:inflight",
            f"{prefix}:model:{model}:waiting:interactive",
            f"{prefix}:model:{model}:waiting:batch",
        ]

    def _buckets(self, model: ResolvedModel) -> list[_Bucket]:
        p, prefix = model.provider, self._prefix(model.provider.name)
        return [
            _Bucket(f"{prefix}:requests", p.rpm, p.burst, "r", model_level=False),
            _Bucket(f"{prefix}:tokens", p.tpm, 0, "t", model_level=False),
            _Bucket(f"{prefix}:model:{model.name}:requests", model.rpm, 0, "r", model_level=True),
            _Bucket(f"{prefix}:model:{model.name}:tokens", model.tpm, 0, "t", model_level=True),
        ]

    @contextmanager
    def slot(
        self, model: str, lane: str, tokens: int = 1, reserved: str | None = None
    ) -> Iterator[CallTicket]:
        """Hold a slot of ``model``'s provider for one call estimated at ``tokens`` (or the
        ``reserved`` one); its answer (put on the ticket) or its 429 adjusts every worker's
        buckets."""
        spec = self._models[model]
        buckets = self._buckets(spec)
        slot_id = reserved or uuid.uuid4().hex
        asked = time.monotonic()
        granted = "slot"
        try:
            if reserved is None:
                granted = self._wait_for_slot(spec, buckets, slot_id, lane, tokens)
        finally:
            metrics.observe_limiter_wait(lane, time.monotonic() - asked)
        ticket = CallTicket()
        outcome, retry_after = "error", 0.0
        said: Mapping[str, float] = {}
        try:
            yield ticket
            outcome = "ok"
        except LLMError as exc:
            said = exc.rate_limits
            if isinstance(exc, TransientLLMError) and exc.kind == "rate_limited":
                outcome, retry_after = "rate_limited", exc.retry_after or 0.0
            elif isinstance(exc, TransientLLMError) and exc.kind in _UNAVAILABLE:
                outcome = "unavailable"
                # A failed probe says the provider is still down, nothing about this step.
                exc.counts_as_attempt = granted != "probe"
            raise
        finally:
            if granted:
                completion = ticket.completion
                if completion is not None:
                    said = completion.rate_limits
                used = (
                    completion.input_tokens + completion.output_tokens
                    if completion is not None and not completion.usage_estimated
                    else tokens
                )
                self._report(
                    spec.provider,
                    buckets,
                    slot_id,
                    outcome,
                    retry_after,
                    correction=tokens - used,
                    said=said,
                )

    def reserve(self, model: str, lane: str, tokens: Sequence[int]) -> list[str]:
        """Slots of ``model``'s provider for a round of calls estimated at ``tokens``, in one
        script call: all of them if the limits have room for the whole round now, else none
        (nor when Redis is unreachable), and each call asks for its own (see slot)."""
        spec = self._models[model]
        buckets = self._buckets(spec)
        if any(0 < b.size() < b.cost(tokens) for b in buckets):
            return []  # the round can never fit at once: no script call to learn so
        slot_ids = [uuid.uuid4().hex for _ in tokens]
        return slot_ids if self._ask(spec, buckets, slot_ids, lane, tokens) == "slot" else []

    def unreserve(self, model: str, slot: str, tokens: int) -> None:
        """Free a reserved slot that no call took, its request and tokens given back."""
        spec = self._models[model]
        self._report(
            spec.provider,
            self._buckets(spec),
            slot,
            "unused",
            0.0,
            correction=tokens,
            said={},
            requests_back=1,
        )

    def _wait_for_slot(
        self, model: ResolvedModel, buckets: list[_Bucket], slot_id: str, lane: str, tokens: int
    ) -> str:
        """'slot' or 'probe' when granted, '' when Redis is unreachable (no limit applies);
        raises TransientLLMError(kind="throttled") after limiter_max_wait_s."""
        s = self._settings
        deadline = time.monotonic() + s.limiter_max_wait_s
        while True:
            answer = self._ask(model, buckets, [slot_id], lane, [tokens])
            if isinstance(answer, str):
                return answer
            if time.monotonic() + answer > deadline:
                # Stop counting as a waiter at once: a ghost interactive waiter holds back
                # every batch call.
                waiting = self._keys(model.provider.name, model.name)[3 if lane == "batch" else 2]
                with contextlib.suppress(redis.RedisError):
                    self._redis.zrem(waiting, slot_id)
                raise TransientLLMError(
                    f"provider limit ({model.provider.name}): no slot within "
                    f"{s.limiter_max_wait_s:g}s",
                    kind="throttled",
                    retry_after=answer,
                )
            # Jitter keeps waiters from polling Redis in lockstep.
            time.sleep(min(answer, _POLL_MAX_S) * random.uniform(0.8, 1.2))

    def _ask(
        self,
        model: ResolvedModel,
        buckets: list[_Bucket],
        slot_ids: Sequence[str],
        lane: str,
        tokens: Sequence[int],
    ) -> str | float:
        """One ACQUIRE for ``slot_ids`` (estimated at ``tokens``): 'slot' or 'probe' when
        granted, '' when Redis is unreachable, else the seconds to wait."""
        s = self._settings
        provider = model.provider
        args: list[str | int | float] = [
            lane,
            ",".join(slot_ids),
            self._slot_ttl,
            provider.max_concurrency,
            s.limiter_interactive_reserve,
            _WAITER_TTL_S,
            s.limiter_breaker_failures,
            s.limiter_breaker_probe_s,
            len(buckets),
        ]
        for b in buckets:
            args += [b.limit_per_min, b.capacity, b.kind, b.cost(tokens)]
        keys = self._keys(provider.name, model.name) + [b.key for b in buckets]
        try:
            answer = self._acquire(keys=keys, args=args)
        except redis.RedisError as exc:
            # One line per call: during an outage every call says it.
            log.warning(
                "provider limiter unavailable; calling without it (%s: %s)", type(exc).__name__, exc
            )
            return ""
        if answer in (b"probe", "probe"):
            return "probe"
        wait = float(answer)
        return "slot" if wait <= 0 else wait

    def _report(
        self,
        provider: ResolvedProvider,
        buckets: list[_Bucket],
        slot_id: str,
        outcome: str,
        retry_after: float,
        *,
        correction: int,
        said: Mapping[str, float],
        requests_back: int = 0,
    ) -> None:
        s = self._settings
        args: list[str | int | float] = [
            slot_id,
            outcome,
            retry_after,
            s.limiter_breaker_failures,
            s.limiter_breaker_probe_s,
            s.limiter_decrease_factor,
            s.limiter_recovery_per_s,
            len(buckets),
        ]
        for b in buckets:
            kind = "requests" if b.kind == "r" else "tokens"
            heard = said if b.model_level else {}
            args += [
                b.limit_per_min,
                b.capacity,
                b.kind,
                correction if b.kind == "t" else requests_back,
                heard.get(f"remaining_{kind}", -1),
                heard.get(f"reset_{kind}_s", -1),
                heard.get(f"limit_{kind}", -1),
            ]
        keys = self._keys(provider.name, "")[:2] + [b.key for b in buckets]
        try:
            self._release(keys=keys, args=args)
        except redis.RedisError:
            log.warning("provider limiter unavailable; slot %s expires on its own", slot_id)

    def state(self, provider: str | None = None) -> LimiterState:
        """What the limiter allows ``provider`` (default: the first) now and who waits, for
        metrics and status pages; the rates are those of its key's requests bucket."""
        spec = self._providers[provider] if provider else next(iter(self._providers.values()))
        models = [m for m in self._models.values() if m.provider.name == spec.name]
        now = time.time()
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.hget(f"{self._prefix(spec.name)}:requests", "rate")
            pipe.zcount(self._keys(spec.name, "")[1], now, "+inf")
            for model in models:
                for key in self._keys(spec.name, model.name)[2:]:
                    pipe.zcount(key, now, "+inf")
            rate, in_flight, *waiting = pipe.execute()
        waiting_i, waiting_b = sum(waiting[0::2]), sum(waiting[1::2])
        allowed = float(rate) if rate is not None else spec.rpm / 60
        return LimiterState(
            allowed_rpm=allowed * 60,
            configured_rpm=spec.rpm,
            in_flight=int(in_flight),
            waiting_interactive=int(waiting_i),
            waiting_batch=int(waiting_b),
        )

    def providers(self) -> list[str]:
        return list(self._providers)

    def bucket_states(self) -> list[BucketState]:
        """Every bucket that has a limit (configured or stated), with its allowed rate."""
        entries: list[tuple[str, str, str, _Bucket]] = []
        for spec in self._providers.values():
            first = next(m for m in self._models.values() if m.provider.name == spec.name)
            key_buckets = self._buckets(first)[:2]
            for b in key_buckets:
                entries.append((spec.name, "*", b.kind, b))
        for model in self._models.values():
            for b in self._buckets(model)[2:]:
                entries.append((model.provider.name, model.name, b.kind, b))
        with self._redis.pipeline(transaction=False) as pipe:
            for *_, b in entries:
                pipe.hmget(b.key, "rate", "stated")
            answers = pipe.execute()
        states = []
        for (provider, name, kind, b), (rate, stated) in zip(entries, answers, strict=True):
            limit = float(b.limit_per_min or (float(stated) if stated is not None else 0))
            if limit <= 0:
                continue
            allowed = float(rate) * 60 if rate is not None else limit
            states.append(
                BucketState(
                    provider,
                    name,
                    "requests" if kind == "r" else "tokens",
                    min(allowed, limit),
                    limit,
                )
            )
        return states
