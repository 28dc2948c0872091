"""``docpipe stack up``: the whole system on one machine, supervised.

PostgreSQL and Redis are started from the local binaries unless DOCPIPE_DATABASE_URL /
DOCPIPE_REDIS_URL name servers to use; the fake provider runs unless DOCPIPE_LLM_BASE_URL
names a real one. Then the API, both worker pools and the single beat start with the same
command lines as their container images. Stopping goes in reverse order with SIGTERM, so
workers finish (or hand back) the steps they are running.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pwd
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from cryptography.fernet import Fernet

from docpipe.settings import get_settings
from docpipe.state.db import Database
from docpipe.state.migrate import apply_migrations
from docpipe.state.tenants import DEFAULT_TENANT, create_api_key, revoke_api_key
from docpipe_dev.localstack import LocalPostgres, LocalRedis, free_port
from docpipe_dev.processes import ManagedProcess, api_argv, beat_argv, fake_llm_argv, worker_argv

__all__ = ["LocalStack", "StackOptions"]

_METRICS_PORT_OFFSETS = {"worker-interactive": 0, "worker-batch": 1, "beat": 2, "api": 3}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StackOptions:
    state_dir: Path = Path(".local/stack")
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    interactive_concurrency: int = 4
    batch_concurrency: int = 4
    fake_latency_ms: str = "200:800"
    fake_rpm: int = 0
    # The worker pools, beat and the API serve /metrics on this port and the next three
    # (0: off).
    metrics_port: int = 9808


@dataclass
class LocalStack:
    options: StackOptions = field(default_factory=StackOptions)
    processes: list[ManagedProcess] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # A key of tenant "default" for the demo and the CLI (DOCPIPE_AUTH=keys), revoked by down().
    api_key: str | None = None
    _api_key_id: str | None = None
    _database_url: str | None = None
    # The servers started here (None when DOCPIPE_DATABASE_URL / DOCPIPE_REDIS_URL name others).
    postgres: LocalPostgres | None = None
    redis: LocalRedis | None = None

    @property
    def api_url(self) -> str:
        return f"http://{self.options.api_host}:{self.options.api_port}"

    def metrics_urls(self) -> dict[str, str]:
        """Each process' Prometheus endpoint, by process name (a scrape config's targets)."""
        urls = {}
        if self.options.metrics_port:
            for name, offset in _METRICS_PORT_OFFSETS.items():
                port = self.options.metrics_port + offset
                urls[name] = f"http://{self.options.api_host}:{port}/metrics"
        return urls

    def up(self) -> LocalStack:
        """Start everything and wait until the API answers; stops what started on failure."""
        try:
            self._start()
        except BaseException:
            self.down()
            raise
        return self

    def _start(self) -> None:
        opts = self.options
        state = opts.state_dir.resolve()
        logs = state / "logs"
        self.env = {}
        database_url = os.environ.get("DOCPIPE_DATABASE_URL")
        if not database_url:
            self.postgres = LocalPostgres(_reachable_dir(state / "postgres"), free_port())
            self.postgres.start()
            database_url = self.postgres.create_database("docpipe")
        self.env["DOCPIPE_DATABASE_URL"] = database_url
        if not os.environ.get("DOCPIPE_SECRETS_KEY"):
            self.env["DOCPIPE_SECRETS_KEY"] = _local_secrets_key(state)
        applied = apply_migrations(database_url)
        log.info("database ready (%d migrations applied now)", len(applied))
        self._database_url = database_url
        if get_settings().auth == "keys":
            with _database(database_url) as db:
                created = create_api_key(db, DEFAULT_TENANT, "docpipe stack")
            self.api_key, self._api_key_id = created.plaintext, created.key.id
        if not (redis_url := os.environ.get("DOCPIPE_REDIS_URL")):
            self.redis = LocalRedis(state / "redis", free_port(), persist=True)
            self.redis.start()
            redis_url = self.redis.url
        self.env["DOCPIPE_REDIS_URL"] = redis_url
        # One batch run in flight per batch worker process (see DOCPIPE_BATCH_ADMISSION_WINDOW).
        window = os.environ.get("DOCPIPE_BATCH_ADMISSION_WINDOW", str(opts.batch_concurrency))
        self.env["DOCPIPE_BATCH_ADMISSION_WINDOW"] = window
        if not os.environ.get("DOCPIPE_LLM_BASE_URL"):
            port = free_port()
            fake = self._spawn(
                "fake-llm",
                fake_llm_argv(
                    host="127.0.0.1", port=port, latency_ms=opts.fake_latency_ms, rpm=opts.fake_rpm
                ),
                logs,
            )
            _wait_http(f"http://127.0.0.1:{port}/healthz", fake)
            self.env["DOCPIPE_LLM_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
        for lane, concurrency in (
            ("interactive", opts.interactive_concurrency),
            ("batch", opts.batch_concurrency),
        ):
            self._spawn(
                f"worker-{lane}",
                worker_argv(lane, concurrency=concurrency),
                logs,
                liveness=state / f"worker-{lane}.alive",
            )
        self._spawn("beat", beat_argv(), logs, liveness=state / "beat.alive")
        api = self._spawn("api", api_argv(host=opts.api_host, port=opts.api_port), logs)
        _wait_http(f"{self.api_url}/readyz", api)
        for proc in self.processes:
            if proc.name.startswith("worker-"):
                proc.wait_for_log(r"\bready\.", timeout_s=60)

    def _spawn(
        self, name: str, argv: list[str], logs: Path, *, liveness: Path | None = None
    ) -> ManagedProcess:
        env = {**self.env, **({"DOCPIPE_LIVENESS_FILE": str(liveness)} if liveness else {})}
        if name in _METRICS_PORT_OFFSETS:  # one port each: they share the host here
            base, host = self.options.metrics_port, self.options.api_host
            port = base + _METRICS_PORT_OFFSETS[name] if base else 0
            env |= {"DOCPIPE_METRICS_PORT": str(port), "DOCPIPE_METRICS_HOST": host}
        proc = ManagedProcess(name, argv, logs / f"{name}.log", env=env).start()
        self.processes.append(proc)
        log.info("started %s (pid %d), log: %s", name, proc.pid, proc.log_path)
        return proc

    def process(self, name: str) -> ManagedProcess:
        return next(p for p in self.processes if p.name == name and p.alive())

    def halt(self, name: str, *, kill: bool) -> ManagedProcess:
        """Stop ``name``: SIGKILL of its whole process tree, or SIGTERM and wait for it."""
        old = self.process(name)
        if kill:
            old.kill_group()
        else:
            old.stop(timeout_s=120)
        self.processes.remove(old)
        return old

    def resume(self, old: ManagedProcess) -> ManagedProcess:
        """Start a halted process again with the same command line and environment."""
        new = ManagedProcess(old.name, old.argv, old.log_path, env=old.env).start()
        self.processes.append(new)
        return new

    def replace(self, name: str, *, kill: bool) -> ManagedProcess:
        """Halt ``name`` and start it again at once, as a container restart would."""
        return self.resume(self.halt(name, kill=kill))

    def dead_processes(self) -> list[ManagedProcess]:
        return [p for p in self.processes if not p.alive()]

    def down(self) -> None:
        """Stop in reverse start order: the API first, then beat, workers, provider, stores."""
        for proc in reversed(self.processes):
            code = proc.stop(timeout_s=90)
            log.info("stopped %s (exit %s)", proc.name, code)
        self.processes.clear()
        if self._api_key_id is not None and self._database_url is not None:
            with contextlib.suppress(psycopg.Error), _database(self._database_url) as db:
                revoke_api_key(db, self._api_key_id)
            self.api_key = self._api_key_id = None
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()


def _local_secrets_key(state: Path) -> str:
    """This stack's DOCPIPE_SECRETS_KEY (the web pages' cookies and stored webhook secrets
    are encrypted under it): made once and kept with the stack's data, so that a restart
    still reads what the last run stored."""
    path = state / "secrets-key"
    if not path.exists():
        state.mkdir(parents=True, exist_ok=True)
        path.write_text(Fernet.generate_key().decode(), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


@contextlib.contextmanager
def _database(url: str) -> Iterator[Database]:
    db = Database(url, max_size=1)
    try:
        yield db
    finally:
        db.close()


def _reachable_dir(path: Path) -> Path:
    """PostgreSQL runs as the postgres user when we are root; if it cannot reach ``path``
    (a checkout under /root), keep the cluster in the postgres user's home instead."""
    if os.geteuid() == 0 and any(p.exists() and not p.stat().st_mode & 0o001 for p in path.parents):
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
        return Path(pwd.getpwnam("postgres").pw_dir) / "docpipe-stack" / digest
    return path


def _wait_http(url: str, proc: ManagedProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited during start-up:\n{proc.log_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer 200 within {timeout_s}s")
