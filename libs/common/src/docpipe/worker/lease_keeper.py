"""The lease keeper: renews the leases of the steps a worker process runs while they run."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from docpipe.providers.calls import StepCalls
from docpipe.settings import Settings
from docpipe.state import runs
from docpipe.state.db import Database

__all__ = ["LeaseKeeper"]

log = logging.getLogger(__name__)

StepKey = tuple[str, str]  # (run id, step)


@dataclass(eq=False)
class _Held:
    claim: runs.Claim
    ctx: StepCalls
    thread: int  # the thread running the step
    due: float  # monotonic time of its next renewal

    @property
    def key(self) -> StepKey:
        return (self.claim.run_id, self.claim.step)


class LeaseKeeper:
    """Renews the leases of the steps its executor runs, each once a heartbeat from its
    claim, from one background thread for the executor's life (not one per step: starting,
    waking and joining a thread for each step cost more than the rest of its bookkeeping).
    The leases due at one wake-up are renewed in one statement: a threads worker holds
    hundreds of steps.

    If the process dies its lease session ends with it and the step is handed to another
    worker at once; if it is cut off, the renewals stop reaching PostgreSQL, the lease
    expires after lease_ttl_s and the reaper hands the step on then. Recovery never waits
    for the broker. A step whose thread passed its hard time limit is given up
    (:meth:`give_up`).
    """

    def __init__(
        self, db: Database, settings: Settings, owner: str, session: Callable[[], int | None]
    ) -> None:
        self._db = db
        self._settings = settings
        self._owner = owner
        self._session = session  # the key of the process' lease session now
        self._lock = threading.Lock()
        self._held: set[_Held] = set()
        # Steps given up whose thread has not returned yet: this process must not claim them
        # again meanwhile (that thread would still act under the same owner).
        self._given_up: set[StepKey] = set()
        self._thread: threading.Thread | None = None

    @contextmanager
    def holding(self, claim: runs.Claim, ctx: StepCalls) -> Iterator[None]:
        """Keep ``claim``'s lease while the block runs; a lost lease stops ``ctx`` sending."""
        interval = self._settings.heartbeat_interval_s
        held = _Held(claim, ctx, threading.get_ident(), due=time.monotonic() + interval)
        with self._lock:
            self._held.add(held)
            if self._thread is None or not self._thread.is_alive():  # first use, or a fork
                self._thread = threading.Thread(
                    target=self._renew_due, name="lease-keeper", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                if held in self._held:
                    self._held.discard(held)
                else:  # lost or given up meanwhile
                    self._given_up.discard(held.key)

    def given_up(self, run_id: str, step: str) -> bool:
        """True while a thread of this process still runs ``step`` after giving it up."""
        with self._lock:
            return (run_id, step) in self._given_up

    def give_up(self, thread: int) -> list[StepKey]:
        """Give up the steps ``thread`` runs (its task passed its hard time limit): no call
        of theirs starts any more, their leases end now and the reaper hands them on."""
        with self._lock:
            mine = [h for h in self._held if h.thread == thread]
            self._held.difference_update(mine)
            self._given_up.update(h.key for h in mine)
        for held in mine:
            held.ctx.stop_sending()
            run_id, step = held.key
            log.error("step %s/%s given up at its hard time limit", run_id, step)
            runs.give_up_lease(
                self._db,
                run_id,
                step,
                owner=self._owner,
                error="given up: its task passed the hard time limit",
            )
        return [h.key for h in mine]

    def _renew_due(self) -> None:
        interval = self._settings.heartbeat_interval_s
        while True:
            now = time.monotonic()
            with self._lock:
                # Those due within half a heartbeat go now too: one statement, not one each.
                due = [h for h in self._held if h.due <= now + interval / 2]
            if due:
                for held in due:
                    held.due = now + interval
                self._renew(due)
            with self._lock:
                # Woken at least once a heartbeat, so a step held meanwhile is renewed on
                # time: its first renewal is due a whole heartbeat after its claim.
                upcoming = min((h.due for h in self._held), default=now + interval)
            time.sleep(max(0.0, min(upcoming - time.monotonic(), interval)))

    def _renew(self, due: list[_Held]) -> None:
        try:
            kept = runs.renew_leases(
                self._db,
                [h.key for h in due],
                owner=self._owner,
                lease_s=self._settings.lease_ttl_s,
                session=self._session(),
            )
        except Exception:  # a database blip: try again at the next beat
            log.exception("lease renewal failed for %d step(s)", len(due))
            return
        for held in due:
            if held.key in kept:
                continue
            with self._lock:
                still_held = held in self._held
                self._held.discard(held)
            if still_held:
                # Another worker has the step now, or its run ended (cancelled): the calls
                # not yet sent must not go out.
                log.warning("lease of %s/%s lost", *held.key)
                held.ctx.stop_sending()
