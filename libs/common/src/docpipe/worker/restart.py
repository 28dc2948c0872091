"""A worker process restarting itself: Celery's warm shutdown, then the same command again.

What the threads pool does where a prefork pool would replace one pool process (memory per
child) or kill it (a hard time limit). Celery's own SIGHUP handler restarts the same way,
but only when the worker is not attached to a terminal; this one always does. The process
keeps its pid, so a supervisor (Kubernetes, ``docpipe stack up``) sees no exit and applies
no restart back-off; its PostgreSQL sessions, and with them the leases of anything left
behind, end with the exec.

A stop asked for while the process drains for its restart (SIGTERM: Kubernetes deleting the
pod, ``docpipe stack down``) is a stop: once drained the process exits, where executing
itself again would lose the signal and keep the supervisor waiting for its kill.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
from typing import Any

from celery.platforms import EX_OK, close_open_fds
from celery.signals import worker_shutting_down
from celery.worker import state

__all__ = ["restart_after_shutdown"]

log = logging.getLogger(__name__)

# Set by Celery's warm or cold shutdown handler (SIGTERM, SIGINT, SIGQUIT); a restart itself
# only sets state.should_stop, the same flag a warm shutdown sets, and sends no signal.
_stop_asked = threading.Event()


@worker_shutting_down.connect
def _remember_the_stop(**_: Any) -> None:
    _stop_asked.set()


def restart_after_shutdown(reason: str) -> None:
    """Start the worker's warm shutdown (it stops taking messages, the pool drains), and
    execute the worker's command line again once it has exited."""
    log.warning("restarting this worker process: %s", reason)
    atexit.register(_execute_again)
    state.should_stop = EX_OK


def _execute_again() -> None:
    # From here a SIGTERM ends the process at once (the default action). signal.signal runs
    # the handlers of signals already received first, so a SIGTERM of the drain's last
    # moment is seen below.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _stop_asked.is_set():
        log.warning("not restarting: asked to stop during the restart's drain")
        return
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    close_open_fds([sys.__stdin__, sys.__stdout__, sys.__stderr__])
    # The command as it was given (`celery ...` or `python -m celery ...`), not sys.argv:
    # under -m, argv[0] is celery's __main__.py, which does not run as a script.
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # noqa: S606
