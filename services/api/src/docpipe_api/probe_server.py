"""The kubelet's probes, answered by a process of their own beside the API's
(DOCPIPE_PROBE_PORT), so that no tenant's request can make a probe wait.

Within the API's process every request shares one event loop and one GIL: 40 requests for
page images queue on the loop ahead of a probe, and a 1 MB review decision's parse holds
the GIL for tens of milliseconds in a heavy request's thread (bench/hostile.py: probes'
p99 164 ms under hostile requests, 25 ms at rest). Here nothing but the probes runs.

What they say is still the API's state. The API's event loop writes a byte into a pipe
every HEARTBEAT_S (docpipe_api.probes): /healthz is 200 while one came within STALE_S, so a
loop stuck that long (or a process stopped) fails liveness as a probe that timed out did
before, however fast the answer. /readyz is that and PostgreSQL answering ``SELECT 1`` on
this process' own kept connection. The pipe closes when the API's process ends, however
it ends, and this process then ends too. Bodies as the API's own probes', without their
``version``; what went wrong goes to the log, never into the answer.

    python -m docpipe_api.probe_server --host H --port P --heartbeat-fd FD
    (DOCPIPE_DATABASE_URL from the environment: never on a command line)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg

from docpipe import __version__
from docpipe_api.readiness import PROBE_TIMEOUTS, PostgresProbe

__all__ = ["HEARTBEAT_S", "STALE_S", "main"]

log = logging.getLogger(__name__)

HEARTBEAT_S = 0.25
# Far above any pause the API's bounds allow its loop (the longest measured under hostile
# requests on a machine at load 17 on 2 cores: 2.6 s), and within the kubelet's liveness
# timeout (3 s) plus one period: a stuck loop fails the next probe or the one after.
STALE_S = 5.0
# The kubelet's probe and a person's at once; more wait for the listening socket.
_KEPT_CONNECTIONS = 2


class _Heartbeat:
    """When the API's loop last wrote into the pipe; ``ended`` once the pipe closed."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._last: float | None = None  # none yet: not live until the loop turned once
        self.ended = threading.Event()

    def follow(self) -> None:
        """Read beats until the API's process closes the pipe (it ended)."""
        while os.read(self._fd, 4096):
            self._last = time.monotonic()
        self.ended.set()

    def fresh(self) -> bool:
        last = self._last
        return last is not None and time.monotonic() - last < STALE_S


def _handler(heartbeat: _Heartbeat, postgres: PostgresProbe) -> type[BaseHTTPRequestHandler]:
    class Probes(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the kubelet's and a bench's connections
        # Headers and body are two writes: with Nagle's algorithm the body waited for the
        # client's delayed ACK, 40 ms a probe.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            if self.path == "/healthz":
                if heartbeat.fresh():
                    self._answer(200, {"status": "ok", "version": __version__})
                else:
                    self._answer(503, {"status": "stalled"})
            elif self.path == "/readyz":
                self._answer(*_readiness(heartbeat, postgres))
            else:
                self._answer(404, {"detail": "this port serves /healthz and /readyz only"})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a probe every few seconds is no news; failures are logged where decided

    return Probes


def _readiness(heartbeat: _Heartbeat, postgres: PostgresProbe) -> tuple[int, dict[str, Any]]:
    if not heartbeat.fresh():
        log.warning("readiness: the API's event loop has not turned for %g s", STALE_S)
        return 503, {"status": "unavailable", "checks": {"api": "unavailable"}}
    try:
        postgres.select_one()
    except (psycopg.Error, OSError) as exc:
        log.warning("readiness: postgres did not answer: %s: %s", type(exc).__name__, exc)
        return 503, {"status": "unavailable", "checks": {"postgres": "unavailable"}}
    return 200, {"status": "ready", "checks": {"postgres": "ok"}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--heartbeat-fd", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    heartbeat = _Heartbeat(args.heartbeat_fd)
    postgres = PostgresProbe(
        os.environ["DOCPIPE_DATABASE_URL"], PROBE_TIMEOUTS, kept=_KEPT_CONNECTIONS
    )
    server = ThreadingHTTPServer((args.host, args.port), _handler(heartbeat, postgres))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        heartbeat.follow()  # returns when the API's process is gone
    finally:
        server.shutdown()
        server.server_close()
        postgres.close()


if __name__ == "__main__":
    main()
