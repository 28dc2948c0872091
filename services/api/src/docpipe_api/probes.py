"""The probes' own process (docpipe_api.probe_server), started and fed by the API's.

At DOCPIPE_PROBE_PORT (0: none; the probes are then the API's own routes only), a child
process answers /healthz and /readyz for this one, and this process' event loop tells it
that it still turns: a byte into a pipe every HEARTBEAT_S. A beat the pipe has no room
for is dropped (the child reads them all; only the last one's time counts). Nothing but
that byte crosses between the two: the child asks PostgreSQL itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator

from docpipe.settings import Settings
from docpipe_api.probe_server import HEARTBEAT_S

__all__ = ["serving_probes"]

log = logging.getLogger(__name__)

_STOP_S = 5


@contextlib.asynccontextmanager
async def serving_probes(settings: Settings) -> AsyncIterator[None]:
    """The probes' process while the app runs (none when DOCPIPE_PROBE_PORT is 0)."""
    if not settings.probe_port:
        yield
        return
    beats, beat = os.pipe()
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "docpipe_api.probe_server",
            "--host",
            settings.probe_host,
            "--port",
            str(settings.probe_port),
            "--heartbeat-fd",
            str(beats),
        ],
        pass_fds=(beats,),
        # The URL (and its password) by environment, never on a command line.
        env={**os.environ, "DOCPIPE_DATABASE_URL": settings.database_url},
    )
    os.close(beats)
    os.set_blocking(beat, False)
    beating = asyncio.create_task(_beat(beat))
    try:
        yield
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        os.close(beat)  # the child sees the pipe end and stops
        try:
            await asyncio.to_thread(child.wait, _STOP_S)
        except subprocess.TimeoutExpired:
            log.warning("the probes' process did not stop in %s s: killed", _STOP_S)
            child.kill()
            await asyncio.to_thread(child.wait)


async def _beat(fd: int) -> None:
    # The first beat waits one period: uvicorn binds the API's port right after the
    # lifespan's start, and the probes must not call the process live before it listens.
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        try:
            os.write(fd, b".")
        except BlockingIOError:
            pass
        except BrokenPipeError:
            # The probes' process ended (its port taken, say): its log says why, and the
            # kubelet, whose probes now fail, restarts the pod.
            log.error("the probes' process has ended: no probes are answered for this one")
            return
