"""``docpipe stack up``: the whole system on one machine, supervised.

PostgreSQL and Redis are started from the local binaries unless DOCPIPE_DATABASE_URL /
DOCPIPE_REDIS_URL name servers to use; the fake provider runs unless DOCPIPE_LLM_BASE_URL
names a real one (or ``llm="local"`` asks for llama.cpp's server with SmolLM2,
docpipe_dev.llama). Then the API, both worker pools and the single beat start with the same
command lines as their container images. Stopping goes in reverse order with SIGTERM, so
workers finish (or hand back) the steps they are running.

The state directory keeps what outlives one start: the databases, the logs, the secrets key,
the stack's API key (the same after a restart), and while the stack runs, the record other
commands read (docpipe.cli.local_stack: ``stack status``, ``stack down``, ``api-key``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pwd
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography.fernet import Fernet

from docpipe.cli.local_stack import (
    KEY_FILE,
    StackProcess,
    StackRecord,
    pid_alive,
    read_record,
    remove_record,
    write_private,
    write_record,
)
from docpipe.settings import get_settings
from docpipe.state.db import Database
from docpipe.state.migrate import apply_migrations
from docpipe.state.tenants import DEFAULT_TENANT, InvalidApiKey, create_api_key, verify_api_key
from docpipe_dev.llama import (
    LOCAL_LLM_ENV,
    find_llama_python,
    llama_server_argv,
    local_llm_providers,
    model_file,
)
from docpipe_dev.localstack import LocalPostgres, LocalRedis, free_port
from docpipe_dev.processes import (
    ManagedProcess,
    api_argv,
    beat_argv,
    fake_llm_argv,
    stop_together,
    worker_argv,
)

__all__ = ["LLM_CHOICES", "LocalStack", "StackAlreadyRunning", "StackOptions", "stop_leftovers"]

# Where the stack's model answers come from: the fake provider, or llama.cpp's server.
LLM_CHOICES = ("fake", "local")
# The llama.cpp server ignores SIGTERM while it generates: it gets this long, then SIGKILL.
_LLAMA_STOP_S = 5.0
# The first answer of a fresh llama.cpp server loads the model: it may take this long.
_LLAMA_START_S = 180.0
# The stack's model servers: stopped after the workers, whose steps in flight call them.
_PROVIDERS = frozenset({"fake-llm", "llm-local"})

# A threads pool's workers run glibc's malloc without its per-thread caches of freed chunks,
# in two arenas: such a worker runs hundreds of threads (a slot's, and the provider calls'),
# each keeping a cache. 200 steps in flight held 0.87-0.89 MB of PSS a step so, 1.00-1.13 MB
# with glibc's defaults, at the same throughput (issue 37, bench.in_flight). The chart sets
# the same for its threads pools; an environment that sets GLIBC_TUNABLES itself wins.
THREADS_POOL_ENV = {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=2"}

_METRICS_PORT_OFFSETS = {"worker-interactive": 0, "worker-batch": 1, "beat": 2, "api": 3}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StackOptions:
    state_dir: Path = Path(".local/stack")
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    interactive_concurrency: int = 4
    batch_concurrency: int = 4
    # Each lane's pool: "prefork" (a process per step) or "threads" (a thread per step,
    # docs/concepts/worker-pools.md), and how many worker processes the batch lane runs.
    interactive_pool: str = "prefork"
    batch_pool: str = "prefork"
    batch_workers: int = 1
    # More environment for the batch lane's workers only (a benchmark's allocator settings,
    # say), over everything else they are given.
    batch_worker_env: Mapping[str, str] = field(default_factory=dict)
    fake_latency_ms: str = "200:800"
    fake_rpm: int = 0
    # The worker pools, beat and the API serve /metrics on this port and the next three
    # (0: off).
    metrics_port: int = 9808
    llm: str = "fake"  # one of LLM_CHOICES; DOCPIPE_LLM_BASE_URL, when set, wins
    llm_python: str | None = None  # the interpreter of llama.cpp's server (docpipe_dev.llama)


class StackAlreadyRunning(RuntimeError):
    """Another stack runs from the same state directory (its databases are in use)."""


@dataclass
class LocalStack:
    options: StackOptions = field(default_factory=StackOptions)
    processes: list[ManagedProcess] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # A key of tenant "default" for the demo and the CLI (DOCPIPE_AUTH=keys), kept in the
    # state directory: a restart keeps it.
    api_key: str | None = None
    # Where the models' answers come from (LLM_CHOICES, or "provider": DOCPIPE_LLM_BASE_URL)
    # and which models the workers may ask, by provider.
    llm: str = "fake"
    models: dict[str, str] = field(default_factory=dict)
    _record: StackRecord | None = None
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
            names = [*_METRICS_PORT_OFFSETS, *_more_batch_workers(self.options.batch_workers)]
            for name in names:
                port = self.options.metrics_port + _metrics_offset(name)
                urls[name] = f"http://{self.options.api_host}:{port}/metrics"
        return urls

    def up(self) -> LocalStack:
        """Start everything and wait until the API answers; stops what started on failure.
        StackAlreadyRunning when a stack runs from the same state directory."""
        state = self.options.state_dir.resolve()
        if (last := read_record(state)) is not None:
            if last.alive():
                raise StackAlreadyRunning(
                    f"a stack is running from {self.options.state_dir} (pid {last.pid}, API "
                    f"{last.api_url}): 'docpipe stack status' shows it, 'docpipe stack down' "
                    "stops it"
                )
            stop_leftovers(last)  # its supervisor was killed: its servers may still run
        try:
            self._start()
            self._write_record()
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
        if get_settings().auth == "keys":
            with _database(database_url) as db:
                self.api_key = _stack_api_key(db, state / KEY_FILE)
        if not (redis_url := os.environ.get("DOCPIPE_REDIS_URL")):
            self.redis = LocalRedis(state / "redis", free_port(), persist=True)
            self.redis.start()
            redis_url = self.redis.url
        self.env["DOCPIPE_REDIS_URL"] = redis_url
        # One batch run in flight per batch worker slot (see DOCPIPE_BATCH_ADMISSION_WINDOW).
        slots = opts.batch_concurrency * opts.batch_workers
        window = os.environ.get("DOCPIPE_BATCH_ADMISSION_WINDOW", str(slots))
        self.env["DOCPIPE_BATCH_ADMISSION_WINDOW"] = window
        if os.environ.get("DOCPIPE_LLM_BASE_URL"):
            self.llm = "provider"
        elif opts.llm == "local":
            self._start_local_llm(logs)
        else:
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
        if not self.models:
            table = get_settings().provider_table
            self.models = {name: m.provider.name for name, m in table.models.items()}
        for lane, concurrency, pool, names in (
            ("interactive", opts.interactive_concurrency, opts.interactive_pool, []),
            (
                "batch",
                opts.batch_concurrency,
                opts.batch_pool,
                _more_batch_workers(opts.batch_workers),
            ),
        ):
            for name in [f"worker-{lane}", *names]:
                self._spawn(
                    name,
                    worker_argv(lane, concurrency=concurrency, name=name.removeprefix("worker-")),
                    logs,
                    liveness=state / f"{name}.alive",
                    env={
                        "DOCPIPE_WORKER_POOL": pool,
                        **_pool_env(pool),
                        **(opts.batch_worker_env if lane == "batch" else {}),
                    },
                )
        self._spawn("beat", beat_argv(), logs, liveness=state / "beat.alive")
        api = self._spawn("api", api_argv(host=opts.api_host, port=opts.api_port), logs)
        _wait_http(f"{self.api_url}/readyz", api)
        for proc in self.processes:
            if proc.name.startswith("worker-"):
                proc.wait_for_log(r"\bready\.", timeout_s=60)

    def _start_local_llm(self, logs: Path) -> None:
        """llama.cpp's server with SmolLM2, answering as every model the deployment prices
        (docpipe_dev.llama), and the limits of so slow a model unless the environment sets
        them; LlamaNotInstalled when make e2e-llm has not built it."""
        python = find_llama_python(self.options.llm_python)
        port = free_port()
        argv = llama_server_argv(python, model_file(python), host="127.0.0.1", port=port)
        server = self._spawn("llm-local", argv, logs)
        url = f"http://127.0.0.1:{port}/v1"
        _wait_http(f"{url}/models", server, timeout_s=_LLAMA_START_S)
        names = sorted(get_settings().provider_table.models)
        self.env["DOCPIPE_PROVIDERS"] = json.dumps(local_llm_providers(url, names))
        self.env["DOCPIPE_LLM_BASE_URL"] = url
        for name, value in LOCAL_LLM_ENV.items():
            self.env[name] = os.environ.get(name, value)
        self.llm, self.models = "local", dict.fromkeys(names, "local")

    def _write_record(self) -> None:
        """What ``docpipe stack status`` and the other commands read while this runs."""
        self._record = StackRecord(
            pid=os.getpid(),
            state_dir=str(self.options.state_dir.resolve()),
            started_at=time.time() if self._record is None else self._record.started_at,
            api_url=self.api_url,
            database_url=self.env["DOCPIPE_DATABASE_URL"],
            redis_url=self.env["DOCPIPE_REDIS_URL"],
            llm_base_url=self.env.get("DOCPIPE_LLM_BASE_URL")
            or os.environ.get("DOCPIPE_LLM_BASE_URL", ""),
            llm=self.llm,
            models=self.models,
            processes=self._stores()
            + [StackProcess(p.name, p.pid, str(p.log_path)) for p in self.processes],
            metrics=self.metrics_urls(),
        )
        write_record(self._record)

    def _stores(self) -> list[StackProcess]:
        """PostgreSQL and Redis, when this stack started them."""
        stores = []
        if self.postgres is not None and (pid := self.postgres.pid) is not None:
            stores.append(StackProcess("postgres", pid, str(self.postgres.log_file)))
        if self.redis is not None and (pid := self.redis.pid) is not None:
            stores.append(StackProcess("redis", pid, str(self.redis.log_file)))
        return stores

    def _spawn(
        self,
        name: str,
        argv: list[str],
        logs: Path,
        *,
        liveness: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> ManagedProcess:
        env = {
            **self.env,
            **({"DOCPIPE_LIVENESS_FILE": str(liveness)} if liveness else {}),
            **(env or {}),
        }
        if name in _METRICS_PORT_OFFSETS or name.startswith("worker-"):  # a port each
            base, host = self.options.metrics_port, self.options.api_host
            port = base + _metrics_offset(name) if base else 0
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
        if self._record is not None:
            self._write_record()
        return new

    def replace(self, name: str, *, kill: bool) -> ManagedProcess:
        """Halt ``name`` and start it again at once, as a container restart would."""
        return self.resume(self.halt(name, kill=kill))

    def dead_processes(self) -> list[ManagedProcess]:
        return [p for p in self.processes if not p.alive()]

    def down(self) -> None:
        """Stop the API, beat and the workers together (each drains on its own: the slowest
        sets the time, not their sum), then the provider their steps in flight still call,
        then the stores."""
        providers = [p for p in reversed(self.processes) if p.name in _PROVIDERS]
        own = [p for p in reversed(self.processes) if p.name not in _PROVIDERS]
        for group in (own, providers):
            codes = stop_together(group, lambda p: _LLAMA_STOP_S if p.name == "llm-local" else 90)
            for proc, code in zip(group, codes, strict=True):
                log.info("stopped %s (exit %s)", proc.name, code)
        self.processes.clear()
        if self._record is not None:
            remove_record(Path(self._record.state_dir), self._record.pid)
            self._record = None
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()


def _pool_env(pool: str) -> dict[str, str]:
    """What a worker of ``pool`` is given beyond the stack's environment (THREADS_POOL_ENV)."""
    if pool != "threads":
        return {}
    return {name: value for name, value in THREADS_POOL_ENV.items() if name not in os.environ}


def _more_batch_workers(count: int) -> list[str]:
    """The names of the batch lane's worker processes after the first."""
    return [f"worker-batch-{n}" for n in range(2, count + 1)]


def _metrics_offset(name: str) -> int:
    """Where ``name``'s metrics port is after the stack's first: the four processes every
    stack runs, then the batch lane's further workers."""
    if name in _METRICS_PORT_OFFSETS:
        return _METRICS_PORT_OFFSETS[name]
    return len(_METRICS_PORT_OFFSETS) + int(name.rsplit("-", 1)[1]) - 2


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


def stop_leftovers(record: StackRecord, timeout_s: float = 30.0) -> list[StackProcess]:
    """Stop what a stack whose supervisor died left running (SIGTERM to each process group
    it started, SIGKILL after ``timeout_s``), forget its record, and return what was
    stopped. A process id that now leads no group of its own is someone else's: left alone."""
    left = [p for p in record.processes if pid_alive(p.pid) and _leads_group(p.pid)]
    for proc in reversed(left):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(pid_alive(p.pid) for p in left) and time.monotonic() < deadline:
        time.sleep(0.2)
    for proc in left:
        if pid_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    remove_record(Path(record.state_dir), record.pid)
    return left


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _stack_api_key(db: Database, path: Path) -> str:
    """The stack's key of tenant "default": the one kept at ``path`` while it is valid in
    this database, else a new one, kept there (readable by its owner only)."""
    with contextlib.suppress(FileNotFoundError, InvalidApiKey):
        kept = path.read_text(encoding="utf-8").strip()
        if verify_api_key(db, kept)[1] == DEFAULT_TENANT:
            return kept
    created = create_api_key(db, DEFAULT_TENANT, "docpipe stack")
    write_private(path, created.plaintext + "\n")
    return created.plaintext


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
