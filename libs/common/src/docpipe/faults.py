"""Fault injection for crash tests: die at a named point exactly as a SIGKILL would.

The point is read from DOCPIPE_CRASH_AT once, when the process starts using it: the tests
set it in a process' environment before they start the process, and a hot path (every API
request) should not look the variable up each time."""

from __future__ import annotations

import logging
import os
from functools import cache

__all__ = ["CRASH_AT_ENV", "crash_point"]

CRASH_AT_ENV = "DOCPIPE_CRASH_AT"

log = logging.getLogger(__name__)


def crash_point(name: str) -> None:
    """Exit at once with status 137 (no cleanup, no flush) if DOCPIPE_CRASH_AT is ``name``."""
    if _crash_at() == name:
        log.critical("crash point %r reached (%s): exiting with status 137", name, CRASH_AT_ENV)
        os._exit(137)


@cache
def _crash_at() -> str | None:
    return os.environ.get(CRASH_AT_ENV)
