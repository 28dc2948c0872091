"""An open-loop HTTP load generator that shows a stalled server and does not stall itself.

Requests are due at a fixed rate whatever the answers do (open loop, no coordinated
omission): each one's latency counts from when it was due, so a server that stalls shows its
whole queue. The generator runs in a process of its own (its own GIL), speaks HTTP/1.1 over
raw asyncio streams on keep-alive connections opened before the clock starts (no client
library's pool or parser in the way: a few tens of microseconds a request), and records for
every request when it was due, when its bytes were written and when its answer was read.
The gap between due and the request's start is the generator's own lag; it is reported, so a run where
the generator fell behind can be told from one where the server did.

    python -m bench.open_loop --url http://127.0.0.1:8000 --rps 200 --seconds 20 \\
        --paths paths.txt [--header 'Authorization: Bearer ...'] [--connections 64]

prints one JSON object: per-request ``[due_s, lag_ms, latency_ms, status]`` rows (status 0:
no answer within --timeout-s or a broken connection).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Sample", "run_open_loop"]


@dataclass(frozen=True)
class Sample:
    due_s: float  # since the start
    lag_ms: float  # due -> the request's task ran: the generator's own delay
    latency_ms: float  # due -> answer read
    status: int  # 0: no answer


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def exchange(self, request: bytes) -> int:
        """Send ``request``; the answer's status, once its body is read."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status


async def _connect(host: str, port: int) -> _Connection:
    reader, writer = await asyncio.open_connection(host, port)
    return _Connection(reader, writer)


async def run_open_loop(
    url: str,
    paths: Sequence[str],
    rps: float,
    seconds: float,
    *,
    headers: Sequence[str] = (),
    connections: int = 64,
    timeout_s: float = 30.0,
    seed: int = 0,
) -> list[Sample]:
    """``rps`` GETs a second for ``seconds``, each of a random one of ``paths``."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    extra = "".join(f"{h}\r\n" for h in headers)
    requests = [f"GET {p} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode() for p in paths]
    free: asyncio.Queue[_Connection] = asyncio.Queue()
    for conn in await asyncio.gather(*(_connect(host, port) for _ in range(connections))):
        free.put_nowait(conn)
    rng = random.Random(seed)
    samples: list[Sample] = []

    async def one(due: float, request: bytes, start: float) -> None:
        began = time.perf_counter()  # how late the generator itself is
        status = 0
        conn = await free.get()
        try:
            status = await asyncio.wait_for(conn.exchange(request), timeout_s)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
            conn.writer.close()
            try:
                conn = await _connect(host, port)
            except OSError:
                return  # the server is gone: this connection is lost too
        finally:
            free.put_nowait(conn)
            end = time.perf_counter()
            samples.append(Sample(due - start, (began - due) * 1000, (end - due) * 1000, status))

    tasks = []
    start = time.perf_counter()
    for i in range(int(rps * seconds)):
        due = start + i / rps
        if (wait := due - time.perf_counter()) > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one(due, rng.choice(requests), start)))
    await asyncio.gather(*tasks)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--paths", required=True, help="a file with one request path a line")
    parser.add_argument("--rps", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--timeout-s", type=float, default=30.0)
    args = parser.parse_args()
    with open(args.paths, encoding="utf-8") as f:
        paths = [line.strip() for line in f if line.strip()]
    if os.geteuid() == 0:
        os.nice(-5)  # ahead of the stack it measures, on a machine it shares
    samples = asyncio.run(
        run_open_loop(
            args.url,
            paths,
            args.rps,
            args.seconds,
            headers=args.header,
            connections=args.connections,
            timeout_s=args.timeout_s,
        )
    )
    rows = [
        [round(s.due_s, 4), round(s.lag_ms, 3), round(s.latency_ms, 3), s.status]
        for s in sorted(samples, key=lambda s: s.due_s)
    ]
    json.dump({"samples": rows}, sys.stdout)


if __name__ == "__main__":
    main()
