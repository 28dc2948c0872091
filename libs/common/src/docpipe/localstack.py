"""Throwaway PostgreSQL and Redis servers run from the locally installed binaries.

`docpipe stack up` uses them when no database or Redis URL is configured (data is kept in the
state directory across restarts), and the test suite uses them for fresh instances on free
ports that chaos tests may kill and restart.

Every failure raises `LocalServiceError` (a `RuntimeError`) with a message that says what to
do; start-up failures carry the tail of the server log.

A `LocalPostgres` owns its state directory ``data_dir``::

    data_dir/pgdata/            the cluster: initdb'd on the first start, reused afterwards
    data_dir/postgres.log       server log, appended across restarts
    data_dir/.s.PGSQL.<port>    unix socket (none if that path is too long; TCP always works)

A `LocalRedis` keeps its append-only file and ``redis.log`` in ``data_dir``.

PostgreSQL refuses to run as root. When we are root, the binaries run as the ``postgres``
user, ``data_dir`` is chowned to it, and every directory above ``data_dir`` must be
searchable by it: pytest's ``tmp_path`` (below a 0700 directory) is not, a
``tempfile.mkdtemp()`` directory chmod-ed to 0o711 is.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

__all__ = [
    "INSTALL_HINT",
    "LocalPostgres",
    "LocalRedis",
    "LocalServiceError",
    "free_port",
    "postgres_bindir",
]

INSTALL_HINT = (
    "install the Debian packages postgresql and redis-server, "
    "or set DOCPIPE_DATABASE_URL / DOCPIPE_REDIS_URL"
)
_TIMEOUT_SECONDS = 30.0
_LOG_TAIL_LINES = 25
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the NUL
_PG_STOP_MODES = ("smart", "fast", "immediate")


class LocalServiceError(RuntimeError):
    """A local PostgreSQL or Redis could not be found, started or stopped."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalPostgres:
    """A PostgreSQL server on 127.0.0.1:`port` whose cluster lives under `data_dir`.

    The port is fixed for the object's lifetime, so `url` stays valid across `restart()` and
    `kill()` + `start()`. Settings trade durability against OS crashes (fsync=off,
    full_page_writes=off) for speed; commits still survive `kill()`.
    """

    def __init__(self, data_dir: Path, port: int | None = None, *, bindir: Path | None = None):
        self.data_dir = Path(data_dir).absolute()
        self.port = free_port() if port is None else port
        self._bindir_override = bindir

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Ensure the server is up and accepting connections (initdb on first use)."""
        if self.is_running():
            return
        bindir = self._bindir()
        self._prepare_data_dir()
        if not (self.pgdata / "PG_VERSION").exists():
            self._run_tool(
                [
                    bindir / "initdb",
                    f"--pgdata={self.pgdata}",
                    "--auth=trust",
                    "--username=postgres",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                    "--no-sync",  # a throwaway cluster need not reach the disk
                ],
                action="initdb",
            )
        self._remove_stale_lock_files()
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": self._socket_dir(),
            "fsync": "off",
            "full_page_writes": "off",
            # With fsync=off a commit's WAL flush is a plain write(2), so keeping it
            # synchronous costs little and keeps acknowledged commits across kill().
            "synchronous_commit": "on",
            "max_connections": "300",
        }
        # pg_ctl hands -o to /bin/sh, hence the shell quoting.
        options = " ".join(f"-c {shlex.quote(f'{key}={value}')}" for key, value in settings.items())
        self._run_tool(
            [
                bindir / "pg_ctl",
                "start",
                f"--pgdata={self.pgdata}",
                f"--log={self.log_file}",
                "--wait",
                f"--timeout={int(_TIMEOUT_SECONDS)}",
                f"--options={options}",
            ],
            action="start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server if it runs; `mode` is pg_ctl's smart, fast or immediate."""
        if mode not in _PG_STOP_MODES:
            raise ValueError(f"mode must be one of {_PG_STOP_MODES}, not {mode!r}")
        if not self.is_running():
            return
        pg_ctl = self._bindir() / "pg_ctl"
        self._run_tool(
            [pg_ctl, "stop", f"--pgdata={self.pgdata}", f"--mode={mode}", "--wait"],
            action="stop",
        )

    def kill(self) -> None:
        """Crash the server: SIGKILL the postmaster and its backends, leaving files as they are."""
        pid = self._postmaster_pid()
        if pid is None or not _is_alive(pid):
            return
        # pg_ctl starts the postmaster in a session of its own, so its process group holds
        # exactly the server's processes; killing them all is what a crash looks like.
        whole_group = _group_of(pid) == pid
        with contextlib.suppress(ProcessLookupError):
            if whole_group:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)

        def gone() -> bool:
            return not (_group_is_alive(pid) if whole_group else _is_alive(pid))

        if not _wait_for(gone, _TIMEOUT_SECONDS):
            raise LocalServiceError(f"PostgreSQL (pid {pid}) survived SIGKILL")
        self._remove_stale_lock_files()

    def restart(self) -> None:
        self.stop()
        self.start()

    def is_running(self) -> bool:
        pid = self._postmaster_pid()
        return pid is not None and _is_alive(pid)

    def create_database(self, name: str) -> str:
        """Ensure database `name` exists and return its URL."""
        psql = self._bindir() / "psql"
        # \gexec runs the generated statement only if the database is missing; psql variables
        # quote the name safely.
        script = (
            "SELECT format('CREATE DATABASE %I', :'name') "
            "WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'name') \\gexec\n"
        )
        argv = [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"name={name}", self.url]
        result = subprocess.run(
            [str(arg) for arg in argv],
            input=script,
            capture_output=True,
            text=True,
            env=_env_without_pg_variables(),
            timeout=_TIMEOUT_SECONDS,
            check=False,
        )
        if result.returncode != 0:
            raise LocalServiceError(f"creating database {name!r} failed: {result.stderr.strip()}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{quote(name, safe='')}"

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

    def _bindir(self) -> Path:
        if self._bindir_override is None:
            return postgres_bindir()
        if not (self._bindir_override / "initdb").is_file():
            raise LocalServiceError(
                f"PostgreSQL's initdb was not found in {self._bindir_override}: {INSTALL_HINT}"
            )
        return self._bindir_override

    def _prepare_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        owner = _postgres_user()
        if self.data_dir.stat().st_uid != owner.pw_uid:
            os.chown(self.data_dir, owner.pw_uid, owner.pw_gid)
        groups = set(os.getgrouplist(owner.pw_name, owner.pw_gid))
        for directory in reversed(self.data_dir.parents):
            if not _searchable_by(directory, owner.pw_uid, groups):
                raise LocalServiceError(
                    f"PostgreSQL runs as the user postgres (we are root), which cannot reach "
                    f"{self.data_dir}: {directory} is not searchable by it. Put the state "
                    "directory below world-searchable directories (for tests: a "
                    "tempfile.mkdtemp() chmod-ed to 0o711, not pytest's tmp_path)."
                )

    def _socket_dir(self) -> str:
        socket_path = str(self.data_dir / f".s.PGSQL.{self.port}")
        usable = len(socket_path.encode()) <= _SUN_PATH_MAX and not set(socket_path) & set(', "')
        return str(self.data_dir) if usable else ""  # "" means TCP only

    def _run_tool(self, argv: Sequence[str | Path], *, action: str) -> None:
        as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        result = subprocess.run(
            [*as_owner, *(str(arg) for arg in argv)],
            cwd=self.data_dir,  # the tools stat their cwd, which must be reachable for postgres
            capture_output=True,
            text=True,
            env=_env_without_pg_variables(),
            timeout=_TIMEOUT_SECONDS + 10,
            check=False,
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            raise LocalServiceError(
                f"PostgreSQL {action} failed for {self.data_dir} (port {self.port}):\n{output}"
                f"{_log_tail(self.log_file)}"
            )

    def _postmaster_pid(self) -> int | None:
        return _pid_in_lock_file(self.pgdata / "postmaster.pid")

    def _remove_stale_lock_files(self) -> None:
        # PostgreSQL cleans these up itself unless their pid still exists, and an unreaped
        # zombie (orphans are not always reaped inside containers) does exist.
        socket_lock = self.data_dir / f".s.PGSQL.{self.port}.lock"
        for lock_file in (self.pgdata / "postmaster.pid", socket_lock):
            pid = _pid_in_lock_file(lock_file)
            if pid is not None and not _is_alive(pid):
                lock_file.unlink(missing_ok=True)


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
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes" if self.persist else "no",
            "--maxmemory-policy", "noeviction",
            "--daemonize", "no",
        ]  # fmt: skip
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
        if not _wait_for(lambda: process.poll() is not None or self._answers(), _TIMEOUT_SECONDS):
            self.kill()
            raise LocalServiceError(
                f"redis-server on port {self.port} did not answer within {_TIMEOUT_SECONDS:.0f} s"
                f"{_log_tail(self.log_file)}"
            )
        if process.poll() is not None:
            self._process = None
            raise LocalServiceError(
                f"redis-server on port {self.port} exited with status {process.returncode}"
                f"{_log_tail(self.log_file)}"
            )

    def stop(self) -> None:
        """Shut the server down cleanly (SIGTERM) and wait for it; its port is then free."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=_TIMEOUT_SECONDS)
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


def postgres_bindir() -> Path:
    """The directory of initdb, pg_ctl, psql, pg_dump: pg_config's if it holds initdb, else
    the newest /usr/lib/postgresql/*/bin, else initdb's on PATH."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        result = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=False
        )
        if result.returncode == 0 and result.stdout.strip():
            candidates.append(Path(result.stdout.strip()))
    debian = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(debian, key=lambda path: _version_key(path.parent.name), reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    found = next((path for path in candidates if (path / "initdb").is_file()), None)
    if found is None:
        raise LocalServiceError(
            f"PostgreSQL's initdb was not found (looked at pg_config, /usr/lib/postgresql, "
            f"PATH): {INSTALL_HINT}"
        )
    return found


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def _postgres_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise LocalServiceError(
            f"PostgreSQL cannot run as root and there is no user postgres: {INSTALL_HINT}"
        ) from None


def _searchable_by(directory: Path, uid: int, gids: set[int]) -> bool:
    info = directory.stat()
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in gids:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _env_without_pg_variables() -> dict[str, str]:
    # PGHOST, PGOPTIONS and friends from the caller's shell would redirect or alter our tools.
    return {key: value for key, value in os.environ.items() if not key.startswith("PG")}


def _pid_in_lock_file(lock_file: Path) -> int | None:
    try:
        first_line = lock_file.read_text().split("\n", 1)[0].strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return int(first_line) if first_line.isdigit() else None


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...), if any."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _is_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _proc_stat(pid)
    return fields is None or fields[0] not in ("Z", "X")


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _group_is_alive(pgid: int) -> bool:
    """True while any non-zombie process of process group `pgid` exists."""
    proc = Path("/proc")
    if not proc.is_dir():
        return _is_alive(pgid)
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields is not None and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                return True
    return False


def _wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _log_tail(log_file: Path) -> str:
    try:
        lines = log_file.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    except OSError:
        return ""
    return f"\n--- last lines of {log_file} ---\n" + "\n".join(lines)
