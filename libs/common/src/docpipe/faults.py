"""Fault injection for crash tests: die at a named point exactly as a SIGKILL would."""

from __future__ import annotations

import logging
import os

__all__ = ["CRASH_AT_ENV", "crash_point"]

CRASH_AT_ENV = "DOCPIPE_CRASH_AT"

log = logging.getLogger(__name__)


def crash_point(name: str) -> None:
    """Exit at once with status 137 (no cleanup, no flush) if DOCPIPE_CRASH_AT is ``name``."""
    if os.environ.get(CRASH_AT_ENV) == name:
        log.critical("crash point %r reached (%s): exiting with status 137", name, CRASH_AT_ENV)
        os._exit(137)
