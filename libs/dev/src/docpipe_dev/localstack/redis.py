"""A throwaway redis-server run from the local binary (see docpipe_dev.localstack)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self

from docpipe_dev.localstack._common import (
    INSTALL_HINT,
    TIMEOUT_SECONDS,
    LocalServiceError,
    free_port,
    log_tail,
    wait_for,
)


class LocalRedis:
    """A redis-server child process on 127.0.0.1:`port` keeping its files in `data_dir`.

    With `persist` the append-only file keeps every acknowledged write across `kill()`;
    without it a restart starts empty. RDB snapshots are off either way.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        persist: bool = True,
        bindir: Path | None = None,
    ):
        self.data_dir = Path(data_dir).absolute()
        self.port = free_port() if port is None else port
        self.persist = persist
        self._bindir_override = bindir
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.data_dir / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Ensure the server runs and answers commands (after loading its append-only file)."""
        if self.is_running():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            self._server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.persist else "no",
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
        ]
        with self.log_file.open("ab") as log:
            # A session of its own keeps a terminal's Ctrl-C away from the server.
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        self._process = process
        if not wait_for(lambda: process.poll() is not None or self._answers(), TIMEOUT_SECONDS):
            self.kill()
            raise LocalServiceError(
                f"redis-server on port {self.port} did not answer within {TIMEOUT_SECONDS:.0f} s"
                f"{log_tail(self.log_file)}"
            )
        if process.poll() is not None:
            self._process = None
            raise LocalServiceError(
                f"redis-server on port {self.port} exited with status {process.returncode}"
                f"{log_tail(self.log_file)}"
            )

    def stop(self) -> None:
        """Shut the server down cleanly (SIGTERM) and wait for it; its port is then free."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """Crash the server with SIGKILL."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def flushall(self) -> None:
        reply = _redis_command(self.port, "FLUSHALL")
        if reply != b"+OK":
            raise LocalServiceError(f"FLUSHALL on port {self.port} failed: {reply!r}")

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (it leads a process group of its own)."""
        return self._process.pid if self.is_running() and self._process is not None else None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _server_binary(self) -> str:
        path = self._bindir_override
        found = shutil.which("redis-server", path=str(path) if path else None)
        if found is None:
            where = f"in {path}" if path else "on PATH"
            raise LocalServiceError(f"redis-server was not found {where}: {INSTALL_HINT}")
        return found

    def _answers(self) -> bool:
        """True once *our* process serves the port (not some other server already on it)."""
        assert self._process is not None
        try:
            # A short timeout: whatever else may hold the port need not speak Redis.
            info = _redis_command(self.port, "INFO", "server", timeout=0.25)
        except OSError:
            return False
        return f"process_id:{self._process.pid}\r\n".encode() in info


def _redis_command(port: int, *args: str, timeout: float = 5.0) -> bytes:
    """Send one command; return a bulk reply's payload or a simple reply's line (+OK, -ERR)."""
    request = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request.encode())
        with sock.makefile("rb") as reply:
            line = reply.readline().rstrip(b"\r\n")
            if line.startswith(b"$") and int(line[1:]) >= 0:
                return reply.read(int(line[1:]) + 2)[:-2]
            return line
