"""Requests that cost the API far more than a read: checking an uploaded file, parsing a
batch, deciding a review, rendering a page image. Their work runs off the event loop, in
threads of its own (:class:`HeavyWork`: never the default thread pool that the reads and
the probes use), at most DOCPIPE_MAX_HEAVY_REQUESTS at once per process; one more is
answered 503 with Retry-After at once, never queued: a queue of heavy requests is memory
and time the API does not have.

A page image is rendered once however many ask for it at once (:class:`Flights`): the
first request renders, the others wait for its answer, success or failure, without a
thread of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio
import anyio.to_thread

from docpipe.errors import DocpipeError

__all__ = ["Busy", "Flights", "HeavyWork"]

T = TypeVar("T")

# A heavy request ends in seconds: retrying after a couple finds a slot.
_RETRY_AFTER_S = 2


class Busy(DocpipeError):
    """This process works on as many heavy requests as it may: 503 with Retry-After."""

    def __init__(self, message: str, *, retry_after_s: int = _RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class HeavyWork:
    """At most ``slots`` heavy requests at once, each run in a thread of this limiter's.
    Made in the app's lifespan (it belongs to the event loop)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._working = 0  # changed on the event loop only
        self._threads = anyio.CapacityLimiter(slots)

    async def run(self, what: str, work: Callable[[], T]) -> T:
        """``work`` in a thread of its own kind; Busy when ``slots`` are taken."""
        if self._working >= self.slots:
            raise Busy(
                f"this API process is {what} and other heavy requests, as many as it may at "
                f"once (DOCPIPE_MAX_HEAVY_REQUESTS={self.slots}); retry"
            )
        self._working += 1
        try:
            return await anyio.to_thread.run_sync(work, limiter=self._threads)
        finally:
            self._working -= 1


class Flights(Generic[T]):
    """One flight of work per key at a time: a request that finds one in the air waits
    for its answer (shielded: a waiter that goes away does not stop it)."""

    def __init__(self) -> None:
        self._flying: dict[Hashable, asyncio.Future[T]] = {}

    async def once(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> T:
        flight = self._flying.get(key)
        if flight is None:
            flight = asyncio.ensure_future(work())
            self._flying[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        return await asyncio.shield(flight)

    def _landed(self, key: Hashable, flight: asyncio.Future[T]) -> None:
        self._flying.pop(key, None)
        if not flight.cancelled():
            flight.exception()  # retrieved: a failure every waiter has gone from is no warning
