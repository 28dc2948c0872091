"""Big request bodies sent the way a hostile client sends them, and the memory they cost the
server (tests/integration/test_bounds.py and bench/api_memory.py).

A body is streamed in chunks over a plain socket, with or without Content-Length
(chunked transfer encoding), and sending stops as soon as the server has answered: a server
that refuses early is seen to refuse early, where an HTTP client library would insist on
sending the whole body first or fail with a broken pipe. Peak memory is the kernel's own
high-water mark of the process (VmHWM), which can be reset between measurements.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

__all__ = [
    "Answer",
    "batch_body_chunks",
    "batch_body_length",
    "file_chunks",
    "peak_rss_bytes",
    "post_in_chunks",
    "reset_peak_rss",
    "rss_bytes",
]

CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent_bytes: int  # of the request body, before the server answered


def batch_body_chunks(documents: int, text_bytes: int) -> Iterator[bytes]:
    """A POST /batches body of ``documents`` inline texts of ``text_bytes`` ASCII bytes each,
    made chunk by chunk (the sender never holds it whole)."""
    yield b'{"documents": ['
    for index in range(documents):
        yield b'{"text": "' if index == 0 else b', {"text": "'
        left = text_bytes
        while left > 0:
            step = min(left, CHUNK_BYTES)
            yield b"x" * step
            left -= step
        yield b'"}'
    yield b"]}"


def file_chunks(data: bytes) -> Iterator[bytes]:
    """A file's bytes as a client streams them, CHUNK_BYTES at a time."""
    for start in range(0, len(data), CHUNK_BYTES):
        yield data[start : start + CHUNK_BYTES]


def batch_body_length(documents: int, text_bytes: int) -> int:
    """The length of what :func:`batch_body_chunks` yields."""
    framing = len(b'{"documents": [') + len(b"]}") + documents * len(b'{"text": ""}')
    return framing + max(documents - 1, 0) * len(b", ") + documents * text_bytes


def post_in_chunks(
    url: str,
    path: str,
    chunks: Iterable[bytes],
    *,
    headers: dict[str, str] | None = None,
    content_length: int | None = None,
    timeout_s: float = 60.0,
    method: str = "POST",
    content_type: str = "application/json",
) -> Answer:
    """POST (or ``method``) ``chunks`` to ``url`` + ``path``; chunked transfer encoding
    unless ``content_length`` is given. Stops sending once the server answers or closes."""
    parts = urlsplit(url)
    head = [
        f"{method} {path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Connection: close",
        f"Content-Type: {content_type}",
    ]
    head += [f"{name}: {value}" for name, value in (headers or {}).items()]
    head.append(
        f"Content-Length: {content_length}"
        if content_length is not None
        else "Transfer-Encoding: chunked"
    )
    sent = 0
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout_s) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        for chunk in chunks:
            if _answered(sock):
                break
            try:
                if content_length is None:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                else:
                    sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        else:
            if content_length is None:
                sock.sendall(b"0\r\n\r\n")
        return _read_answer(sock, sent)


def _answered(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _read_answer(sock: socket.socket, sent: int) -> Answer:
    raw = bytearray()
    while b"\r\n\r\n" not in raw or not _complete(raw):
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        raw += data
    head, _, body = bytes(raw).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(status_line.split()[1]), headers, body, sent)


def _complete(raw: bytearray) -> bool:
    head, _, body = bytes(raw).partition(b"\r\n\r\n")
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return len(body) >= int(value.strip())
    return False  # read until the server closes


def peak_rss_bytes(pid: int) -> int:
    """The process' peak resident memory since it started or since :func:`reset_peak_rss`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def reset_peak_rss(pid: int) -> None:
    """Start the peak over from the current RSS (Linux: "5" to /proc/<pid>/clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
