"""Webhook receivers for tests, on 127.0.0.1: one that answers (and records what it got), one
that accepts the connection and never answers, one that trickles its answer a byte at a
time, one whose answer never ends, and a TLS one with a certificate for a made-up name."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


class _Recording(BaseHTTPRequestHandler):
    answers: list[int]
    received: list[Received]
    server_names: list[str | None]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(Received(dict(self.headers), body))
        status = self.answers.pop(0) if self.answers else 200
        self.send_response(status)
        if status in (301, 302, 307, 308):
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def recording_receiver(
    *answers: int, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[str, type[_Recording]]]:
    """(URL of /hook, the handler class whose ``received`` lists the requests); answers
    ``answers`` in turn, then 200."""
    handler = type(
        "Receiver", (_Recording,), {"answers": list(answers), "received": [], "server_names": []}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        tls.sni_callback = lambda _sock, name, _ctx: handler.server_names.append(name)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}/hook", handler
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Connection:
    opened_at: float
    closed_at: float | None = None
    bytes_received: int = 0
    bytes_sent: int = 0


@dataclass
class RawReceiver:
    """A TCP server that reads requests and answers as ``mode`` says: 'hang' (never a byte),
    'hang-once' (the first connection hangs, later ones get 200), 'trickle' (a status line one
    byte every 0.2 s, for a minute), 'endless' (headers, then a body that never ends). Records
    when each connection opened and when the client closed it."""

    mode: str
    connections: list[Connection] = field(default_factory=list)
    _sock: socket.socket | None = None
    _open: list[socket.socket] = field(default_factory=list)
    _stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        assert self._sock is not None
        return int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> RawReceiver:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        for conn in [*self._open, *([self._sock] if self._sock else [])]:
            with contextlib.suppress(OSError):
                conn.close()

    def closed(self) -> list[Connection]:
        return [c for c in self.connections if c.closed_at is not None]

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            record = Connection(opened_at=time.monotonic())
            self.connections.append(record)
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn, record), daemon=True).start()

    def _serve(self, conn: socket.socket, record: Connection) -> None:
        conn.settimeout(0.2)
        talk = {
            "hang": self._hang,
            "trickle": self._trickle,
            "endless": self._endless,
            "hang-once": self._hang_once,
        }[self.mode]
        try:
            talk(conn, record)
        except OSError:
            pass  # the client went away
        finally:
            record.closed_at = time.monotonic()
            with contextlib.suppress(OSError):
                conn.close()

    def _read(self, conn: socket.socket, record: Connection) -> bool:
        """Read what is there; False once the client has closed."""
        try:
            data = conn.recv(65536)
        except TimeoutError:
            return True
        record.bytes_received += len(data)
        return bool(data)

    def _hang(self, conn: socket.socket, record: Connection) -> None:
        while not self._stopped.is_set() and self._read(conn, record):
            pass

    def _hang_once(self, conn: socket.socket, record: Connection) -> None:
        if record is self.connections[0]:
            self._hang(conn, record)
            return
        self._read(conn, record)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    def _trickle(self, conn: socket.socket, record: Connection) -> None:
        self._read(conn, record)
        deadline = time.monotonic() + 60
        while not self._stopped.is_set() and time.monotonic() < deadline:
            conn.sendall(b"H")
            record.bytes_sent += 1
            time.sleep(0.2)

    def _endless(self, conn: socket.socket, record: Connection) -> None:
        self._read(conn, record)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
        chunk = b"x" * 65536
        while not self._stopped.is_set() and record.bytes_sent < 1_000_000_000:
            conn.sendall(chunk)
            record.bytes_sent += len(chunk)


@contextlib.contextmanager
def raw_receiver(mode: str) -> Iterator[RawReceiver]:
    receiver = RawReceiver(mode).start()
    try:
        yield receiver
    finally:
        receiver.stop()


def tls_contexts(host: str, directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context with a self-signed certificate for ``host``, client context that
    trusts exactly that certificate and checks host names)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cafile=str(cert_file))
    return server, client


def stub_resolver(table: dict[str, list[str]], calls: list[str] | None = None) -> Any:
    """A resolver (the delivery's seam) answering from ``table``; names it is asked for are
    appended to ``calls``."""

    async def resolve(host: str, port: int) -> list[Any]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not in the stub's table")
        return [ipaddress.ip_address(a) for a in table[host]]

    return resolve
