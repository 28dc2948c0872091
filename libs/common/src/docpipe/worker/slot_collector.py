"""A worker's slots at scrape time: how many tasks it runs at once, how many it runs now,
how many it could take, and how long its oldest step in flight has run.

Read in the worker's main process from Celery's own bookkeeping (the requests it handed to
its pool, each stamped when a slot accepted it), so the same figures come from a prefork
pool (a slot is a process) and from a threads pool (a slot is a thread). An oldest step that
keeps aging past the hard time limit is a step stuck; slots in use at their number for long
are a pool too small for what waits in its queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from celery.worker import state
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from docpipe.broker.messages import RUN_STEP
from docpipe.observability import metrics as m

__all__ = ["SlotCollector"]


class SlotCollector(Collector):
    """The gauges of one worker (its Celery WorkController)."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        worker = self._worker
        hostname = str(worker.hostname)
        slots = int(worker.concurrency or 0)
        pool = "threads" if type(worker.pool).__name__ == "ThreadSlotPool" else "prefork"
        # A copy made in one step: slots add and drop requests from other threads.
        active = state.active_requests.copy()
        now = time.time()  # Celery stamps time_start as Unix time
        started = [r.time_start for r in active if r.name == RUN_STEP and r.time_start]
        oldest = max((max(0.0, now - t) for t in started), default=0.0)
        values = {
            m.WORKER_SLOTS: slots,
            m.WORKER_SLOTS_IN_USE: len(active),
            m.WORKER_SLOTS_FREE: max(0, slots - len(active)),
            m.WORKER_OLDEST_STEP_AGE: oldest,
        }
        for name, value in values.items():
            family = m.scraped_gauge(name)
            labels = [hostname, pool] if name == m.WORKER_SLOTS else [hostname]
            family.add_metric(labels, float(value))
            yield family
