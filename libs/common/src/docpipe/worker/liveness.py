"""Liveness without a Python process per probe: the worker's and beat's main loops touch a
file, and the probe only compares its modification time with the clock.

The file is touched from the main process' own timer / tick, so it goes stale exactly when
that loop is stuck; a broker blip alone does not make it stale (Celery keeps its loop
running while it reconnects).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from celery import bootsteps
from celery.beat import Scheduler

from docpipe.observability.metrics import mark_beat_tick
from docpipe.settings import get_settings

__all__ = ["LivenessFile", "LivenessScheduler", "touch"]

log = logging.getLogger(__name__)

TOUCH_EVERY_S = 5.0


def touch(path: Path) -> None:
    try:
        path.touch()
    except OSError:
        log.exception("cannot touch the liveness file %s", path)


class LivenessFile(bootsteps.StartStopStep):  # type: ignore[misc]
    """Worker bootstep: touches DOCPIPE_LIVENESS_FILE every few seconds while running."""

    requires: ClassVar = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.path = get_settings().liveness_file
        self.tref: Any = None

    def start(self, worker: Any) -> None:
        if self.path is None:
            return
        touch(self.path)
        self.tref = worker.timer.call_repeatedly(TOUCH_EVERY_S, touch, (self.path,))

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class LivenessScheduler(Scheduler):  # type: ignore[misc]
    """Beat's in-memory scheduler (no pickled schedule file) that touches the liveness file
    on every tick."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if (path := get_settings().liveness_file) is not None:
            touch(path)
        mark_beat_tick()
        return float(super().tick(*args, **kwargs))
