"""A worker bootstep that notices a dead pool process within half a second.

Celery's prefork parent is meant to learn of a pool process' death from its sentinel pipe at
once, but measured here it often learns only from its own ``maintain_pool`` pass, every 5 s
(bench/recovery.py: 3-4.5 s for an idle or initial pool process SIGKILLed). Until then the
dead process' message is not put back and no new process takes messages: the step of an
OOM-killed pool process waits seconds although its lease (tied to the process' PostgreSQL
session, docpipe.state.leases) ended at once. This step runs the same pass every
:data:`EVERY_S` from the worker's event loop; a pass with nothing to do checks each pool
process' exit status and returns.
"""

from __future__ import annotations

from typing import Any, ClassVar

from celery import bootsteps

__all__ = ["EVERY_S", "PoolWatch"]

EVERY_S = 0.5


class PoolWatch(bootsteps.StartStopStep):  # type: ignore[misc]
    """Runs the prefork pool's maintenance (join the dead, start their replacements, put
    their messages back) every half second; nothing for pools without one (solo, threads)."""

    requires: ClassVar = {"celery.worker.components:Timer", "celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.tref: Any = None

    def start(self, worker: Any) -> None:
        maintain = getattr(worker.pool, "maintain_pool", None)
        if maintain is not None and worker.use_eventloop:
            self.tref = worker.timer.call_repeatedly(EVERY_S, maintain)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
