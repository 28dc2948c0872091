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


@dataclass
class _Held:
    claim: runs.Claim
    ctx: StepCalls
    due: float  # monotonic time of its next renewal


class LeaseKeeper:
    """Renews the leases of the steps its executor runs, each once a heartbeat from its
    claim, from one background thread for the executor's life (not one per step: starting,
    waking and joining a thread for each step cost more than the rest of its bookkeeping).

    If the process dies its lease session ends with it and the step is handed to another
    worker at once; if it is cut off, the renewals stop reaching PostgreSQL, the lease
    expires after lease_ttl_s and the reaper hands the step on then. Recovery never waits
    for the broker.
    """

    def __init__(
        self, db: Database, settings: Settings, owner: str, session: Callable[[], int | None]
    ) -> None:
        self._db = db
        self._settings = settings
        self._owner = owner
        self._session = session  # the key of the process' lease session now
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._thread: threading.Thread | None = None

    @contextmanager
    def holding(self, claim: runs.Claim, ctx: StepCalls) -> Iterator[None]:
        """Keep ``claim``'s lease while the block runs; a lost lease stops ``ctx`` sending."""
        interval = self._settings.heartbeat_interval_s
        held = _Held(claim, ctx, due=time.monotonic() + interval)
        with self._lock:
            self._held[id(held)] = held
            if self._thread is None or not self._thread.is_alive():  # first use, or a fork
                self._thread = threading.Thread(target=self._renew_due, name="lease-keeper",
                                                daemon=True)  # fmt: skip
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(id(held), None)  # (gone already when its lease was lost)

    def _renew_due(self) -> None:
        interval = self._settings.heartbeat_interval_s
        while True:
            now = time.monotonic()
            with self._lock:
                due = [h for h in self._held.values() if h.due <= now]
            for held in due:
                held.due = now + interval
                self._renew(held)
            with self._lock:
                # Woken at least once a heartbeat, so a step held meanwhile is renewed on
                # time: its first renewal is due a whole heartbeat after its claim.
                upcoming = min((h.due for h in self._held.values()), default=now + interval)
            time.sleep(max(0.0, min(upcoming - time.monotonic(), interval)))

    def _renew(self, held: _Held) -> None:
        claim = held.claim
        try:
            kept = runs.renew_lease(self._db, claim.run_id, claim.step, owner=self._owner,
                                    lease_s=self._settings.lease_ttl_s,
                                    session=self._session())  # fmt: skip
        except Exception:  # a database blip: try again at the next beat
            log.exception("lease renewal failed for %s/%s", claim.run_id, claim.step)
            return
        with self._lock:
            still_held = id(held) in self._held
        if not kept and still_held:
            # Another worker has the step now, or its run ended (cancelled): the calls not
            # yet sent must not go out.
            log.warning("lease of %s/%s lost", claim.run_id, claim.step)
            held.ctx.stop_sending()
            with self._lock:
                self._held.pop(id(held), None)
