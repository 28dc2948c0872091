"""Throwaway servers and databases for tests, and a proxy that drops a connection."""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg


def create_database(admin_url: str, prefix: str) -> str:
    """A new empty database on the admin server; returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    return psycopg.conninfo.make_conninfo(admin_url, dbname=name)


@contextmanager
def service_dir(name: str) -> Iterator[Path]:
    """A private state directory that the postgres user can reach when we run as root
    (pytest's own tmp_path lives under a root-only directory)."""
    parent = Path(tempfile.mkdtemp(prefix=f"docpipe-{name}-"))
    parent.chmod(0o711)
    try:
        yield parent / "data"
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@contextmanager
def cutting_proxy(upstream: str, *, cut_after: int) -> Iterator[tuple[str, list[int]]]:
    """(URL, the count of connections it took: one item each) of a TCP proxy on 127.0.0.1
    to ``upstream`` (``http://host:port``) whose first connection is dropped once
    ``cut_after`` bytes of its answer went through, as a network that fails mid-download
    drops it; the connections after it pass whole."""
    host, port = upstream.removeprefix("http://").rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def pump(source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while data := source.recv(65536):
                if limit is not None and sent + len(data) >= limit:
                    sink.sendall(data[: limit - sent])
                    break
                sink.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for end in (source, sink):  # shutdown first: it wakes the other direction's recv
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed
            server = socket.create_connection((host, int(port)))
            limit = None if accepted else cut_after
            accepted.append(1)
            threading.Thread(target=pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=pump, args=(server, client, limit), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.close()
