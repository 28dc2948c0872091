"""A throwaway PostgreSQL cluster run from the local binaries (see docpipe_dev.localstack)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

from docpipe_dev.localstack._common import (
    INSTALL_HINT,
    TIMEOUT_SECONDS,
    LocalServiceError,
    free_port,
    group_is_alive,
    group_of,
    is_alive,
    log_tail,
    pid_in_lock_file,
    wait_for,
)

_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the NUL

_PG_STOP_MODES = ("smart", "fast", "immediate")


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
                f"--timeout={int(TIMEOUT_SECONDS)}",
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
        if pid is None or not is_alive(pid):
            return
        # pg_ctl starts the postmaster in a session of its own, so its process group holds
        # exactly the server's processes; killing them all is what a crash looks like.
        whole_group = group_of(pid) == pid
        with contextlib.suppress(ProcessLookupError):
            if whole_group:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)

        def gone() -> bool:
            return not (group_is_alive(pid) if whole_group else is_alive(pid))

        if not wait_for(gone, TIMEOUT_SECONDS):
            raise LocalServiceError(f"PostgreSQL (pid {pid}) survived SIGKILL")
        self._remove_stale_lock_files()

    def restart(self) -> None:
        self.stop()
        self.start()

    def is_running(self) -> bool:
        pid = self._postmaster_pid()
        return pid is not None and is_alive(pid)

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while it runs."""
        pid = self._postmaster_pid()
        return pid if pid is not None and is_alive(pid) else None

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
            timeout=TIMEOUT_SECONDS,
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
            timeout=TIMEOUT_SECONDS + 10,
            check=False,
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            raise LocalServiceError(
                f"PostgreSQL {action} failed for {self.data_dir} (port {self.port}):\n{output}"
                f"{log_tail(self.log_file)}"
            )

    def _postmaster_pid(self) -> int | None:
        return pid_in_lock_file(self.pgdata / "postmaster.pid")

    def _remove_stale_lock_files(self) -> None:
        # PostgreSQL cleans these up itself unless their pid still exists, and an unreaped
        # zombie (orphans are not always reaped inside containers) does exist.
        socket_lock = self.data_dir / f".s.PGSQL.{self.port}.lock"
        for lock_file in (self.pgdata / "postmaster.pid", socket_lock):
            pid = pid_in_lock_file(lock_file)
            if pid is not None and not is_alive(pid):
                lock_file.unlink(missing_ok=True)


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
