"""A process in a network namespace of its own, reached over a veth pair, and a partition
that drops its packets, so that its connections hang the way they do when a node or a
network path disappears: no reset, no ICMP error, just silence.

The partition is an iptables DROP of everything in and out *inside* the namespace, so the
machine's own firewall is never touched. (tc netem would do the same; this kernel has no
sch_netem, and a namespaced DROP needs nothing more than iproute2 and iptables.) Needs root.

    with NetworkNamespace() as ns:
        server = ns.start("redis", ["redis-server", "--bind", ns.address, ...], log_dir)
        ns.drop()   # every packet to or from the namespace vanishes
        ns.heal()

A client inside the namespace (a worker) reaches servers of the host that listen on loopback
through a :class:`TcpForwarder` on the host's end of the veth: the servers keep seeing a
connection that is alive, as a server does when its client's node is lost.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from docpipe_dev.localstack import LocalPostgres
from docpipe_dev.localstack.postgres import postgres_bindir
from docpipe_dev.processes import ManagedProcess

__all__ = ["NetworkNamespace", "TcpForwarder", "postgres_in"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


class NetworkNamespace:
    """A namespace named ``dp<8 hex>`` at ``address`` (a /30 of 10.250.0.0/16), whose processes
    are stopped and whose links are deleted on exit."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("iptables") is None:
            raise RuntimeError("network namespaces need root, iproute2 and iptables")
        self.name = f"dp{uuid.uuid4().hex[:8]}"
        self._host_link, self._inner_link = f"{self.name}h", f"{self.name}n"
        block = random.randrange(1 << 14) * 4  # a random /30, unlikely to be taken
        prefix = f"10.250.{block >> 8}.{block & 0xFF}"
        base = prefix.rsplit(".", 1)[0]
        last = int(prefix.rsplit(".", 1)[1])
        self.host_address = f"{base}.{last + 1}"
        self.address = f"{base}.{last + 2}"
        self._processes: list[ManagedProcess] = []

    def __enter__(self) -> NetworkNamespace:
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self._host_link, "type", "veth", "peer", "name", self._inner_link)
            _ip("link", "set", self._inner_link, "netns", self.name)
            _ip("addr", "add", f"{self.host_address}/30", "dev", self._host_link)
            _ip("link", "set", self._host_link, "up")
            inside = ("netns", "exec", self.name, "ip")
            _ip(*inside, "addr", "add", f"{self.address}/30", "dev", self._inner_link)
            _ip(*inside, "link", "set", self._inner_link, "up")
            _ip(*inside, "link", "set", "lo", "up")
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._remove()

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def start(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> ManagedProcess:
        """Start a process inside the namespace; it is stopped when the namespace goes."""
        process = ManagedProcess(name, self.argv(argv), log_path, env=env or {}).start()
        self._processes.append(process)
        return process

    def drop(self) -> None:
        """Partition: every packet into or out of the namespace is silently dropped."""
        for chain in ("INPUT", "OUTPUT"):
            self._iptables("-I", chain, "-j", "DROP")

    def heal(self) -> None:
        for chain in ("INPUT", "OUTPUT"):
            self._iptables("-F", chain)

    def _iptables(self, *args: str) -> None:
        _ip("netns", "exec", self.name, "iptables", *args)

    def _remove(self) -> None:
        for process in reversed(self._processes):
            process.kill_group()
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", self._host_link)  # deletes its peer too
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", self.name)


def postgres_in(ns: NetworkNamespace, data_dir: Path, port: int = 5432) -> str:
    """A PostgreSQL cluster (initialised in ``data_dir``, which the postgres user must reach)
    serving ``ns.address:port`` from inside ``ns``; returns the URL of its postgres database."""
    initialised = LocalPostgres(data_dir)
    initialised.start()  # initdb, as every throwaway cluster of the tests is made
    initialised.stop()
    # initdb trusts loopback clients only; the tests connect from the host's end of the veth.
    with (initialised.pgdata / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {ns.host_address}/32 trust\n")
    argv = [
        str(postgres_bindir() / "postgres"),
        "-D",
        str(initialised.pgdata),
        "-c",
        f"listen_addresses={ns.address}",
        "-c",
        f"port={port}",
        "-c",
        "unix_socket_directories=",
        "-c",
        "fsync=off",
    ]
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    log_path = data_dir / "postgres-ns.log"
    ns.start("postgres", [*as_postgres, *argv], log_path)
    return f"postgresql://postgres@{ns.address}:{port}/postgres"


class TcpForwarder:
    """Accepts connections on ``host:port`` (a free port) and relays each to
    ``127.0.0.1:target_port``, until closed. Each connection is relayed by two threads: a few
    dozen connections of a worker or two, not a load balancer."""

    def __init__(self, host: str, target_port: int) -> None:
        self._target_port = target_port
        self._listener = socket.create_server((host, 0))
        self.host, self.port = host, int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"forward-{self.port}", daemon=True).start()

    def __enter__(self) -> TcpForwarder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self._target_port), timeout=10)
            except OSError:
                return  # closed
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either end closes; then close both, as a peer's FIN
    or reset would reach the other side."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
