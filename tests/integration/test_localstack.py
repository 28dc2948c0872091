"""The throwaway PostgreSQL and Redis servers that tests and `docpipe stack up` start."""

import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from docpipe_dev.localstack import LocalPostgres, LocalRedis, LocalServiceError

Server = LocalPostgres | LocalRedis


@pytest.fixture
def state_dir() -> Iterator[Path]:
    # As root, PostgreSQL runs as the user postgres, which cannot enter pytest's tmp_path
    # (it sits below a 0700 directory); a 0711 directory in the system temp dir it can.
    with tempfile.TemporaryDirectory(prefix="docpipe-localstack-") as name:
        path = Path(name)
        path.chmod(0o711)
        yield path


@pytest.fixture
def postgres(state_dir: Path) -> Iterator[LocalPostgres]:
    with LocalPostgres(state_dir / "postgres") as server:
        yield server


def count_rows(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM notes").fetchone()
    assert row is not None
    return int(row[0])


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_postgres_keeps_committed_rows_after_kill(postgres: LocalPostgres) -> None:
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (body text)")
        for i in range(100):
            conn.execute("INSERT INTO notes VALUES (%s)", (f"note {i}",))

    postgres.kill()
    assert not postgres.is_running()
    postgres.start()

    assert count_rows(postgres.url) == 100


def test_postgres_keeps_its_url_across_restart(postgres: LocalPostgres) -> None:
    url = postgres.url
    postgres.restart()

    assert postgres.url == url
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_postgres_on_an_existing_state_dir_keeps_its_data(state_dir: Path) -> None:
    # `docpipe stack up` after `stack down`: a new object, maybe a new port, the same data.
    first = LocalPostgres(state_dir / "postgres")
    with first, psycopg.connect(first.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (body text)")
        conn.execute("INSERT INTO notes VALUES ('kept')")

    with LocalPostgres(state_dir / "postgres") as second:
        assert count_rows(second.url) == 1


def test_create_database_is_idempotent_and_returns_its_url(postgres: LocalPostgres) -> None:
    url = postgres.create_database('tenant "a"')

    assert postgres.create_database('tenant "a"') == url
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ('tenant "a"',)


@pytest.mark.parametrize(("persist", "keys_after_kill"), [(True, 100), (False, 0)])
def test_redis_keeps_writes_after_kill_only_when_persistent(
    state_dir: Path, persist: bool, keys_after_kill: int
) -> None:
    with LocalRedis(state_dir / "redis", persist=persist) as server:
        with redis.Redis.from_url(server.url) as client:
            for i in range(100):
                client.set(f"key:{i}", i)

        server.kill()
        assert not server.is_running()
        server.start()

        with redis.Redis.from_url(server.url) as client:
            assert client.dbsize() == keys_after_kill


def test_redis_flushall_empties_it(state_dir: Path) -> None:
    with LocalRedis(state_dir / "redis") as server, redis.Redis.from_url(server.url) as client:
        client.set("key", "value")
        server.flushall()
        assert client.dbsize() == 0


@pytest.mark.parametrize("make_server", [LocalPostgres, LocalRedis])
def test_stop_frees_the_port(state_dir: Path, make_server: Callable[[Path], Server]) -> None:
    with make_server(state_dir / "server") as server:
        assert server.is_running()
        assert not port_is_free(server.port)

    assert not server.is_running()
    assert port_is_free(server.port)
    server.stop()  # stopping a stopped server is a no-op


@pytest.mark.parametrize("server_class", [LocalPostgres, LocalRedis])
def test_missing_binaries_raise_an_error_with_the_install_hint(
    tmp_path: Path, server_class: type[Server]
) -> None:
    server = server_class(tmp_path / "server", bindir=tmp_path)

    with pytest.raises(LocalServiceError, match="install the Debian packages postgresql"):
        server.start()


@pytest.mark.parametrize(
    ("server_class", "log_says"),
    [(LocalPostgres, "could not bind"), (LocalRedis, "Address already in use")],
)
def test_start_failure_shows_the_server_log(
    state_dir: Path, server_class: type[Server], log_says: str
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        server = server_class(state_dir / "server", squatter.getsockname()[1])

        with pytest.raises(LocalServiceError, match=log_says):
            server.start()
    assert not server.is_running()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands PostgreSQL to the user postgres")
def test_postgres_as_root_refuses_a_state_dir_the_postgres_user_cannot_reach(
    tmp_path: Path,
) -> None:
    with pytest.raises(LocalServiceError, match="not searchable"):
        LocalPostgres(tmp_path / "postgres").start()
