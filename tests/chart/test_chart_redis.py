"""The bundled Redis: a memory ceiling below its container's limit that refuses writes
instead of evicting messages, and a password that never appears on its command line. The
rendered configuration is run by a real redis-server."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import helm_python
import pytest
import redis

from docpipe_dev.localstack import free_port
from tests.chart.helm import Obj, env_of, named, render

PASSWORD = 'pa"ss\\word with spaces'


def test_the_password_reaches_redis_in_a_secret_file_not_its_arguments() -> None:
    objects = render({"redis": {"password": PASSWORD}})
    pod = named(objects, "Deployment", "docpipe-redis")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["redis-server", "/etc/redis-config/redis.conf"]
    assert "args" not in container
    # Only the probes' redis-cli gets it, from the Secret, as an environment variable.
    assert env_of(container) == {
        "REDISCLI_AUTH": {"secretKeyRef": {"name": "docpipe", "key": "redis-password"}}
    }
    auth = next(v for v in pod["volumes"] if v["name"] == "auth")["secret"]
    assert auth["items"] == [{"key": "redis-auth.conf", "path": "auth.conf"}]
    assert auth["defaultMode"] == 0o440


@pytest.mark.parametrize(
    ("limit", "maxmemory", "refused"),
    [("256Mi", 192, False), ("256Mi", 200, True), ("1Gi", 768, False), ("1Gi", 800, True)],
)
def test_maxmemory_must_leave_a_quarter_of_the_memory_limit(
    limit: str, maxmemory: int, refused: bool
) -> None:
    values = {"redis": {"maxmemoryMb": maxmemory, "resources": {"limits": {"memory": limit}}}}
    if refused:
        with pytest.raises(helm_python.HelmRenderError, match="must be at most 3/4 of"):
            render(values)
    else:
        conf = named(render(values), "ConfigMap", "docpipe-redis")["data"]["redis.conf"]
        assert f"maxmemory {maxmemory}mb\n" in conf


def test_a_memory_limit_the_chart_cannot_read_is_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="write it in Mi or Gi"):
        render({"redis": {"resources": {"limits": {"memory": "300M"}}}})


@pytest.fixture
def bundled_redis(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Obj]]:
    """redis-server started exactly as the pod starts it, from the rendered files."""
    objects = render({"redis": {"password": PASSWORD}})
    secret = named(objects, "Secret", "docpipe")["data"]
    conf = named(objects, "ConfigMap", "docpipe-redis")["data"]["redis.conf"]
    (tmp_path / "auth").mkdir()
    (tmp_path / "auth" / "auth.conf").write_bytes(base64.b64decode(secret["redis-auth.conf"]))
    (tmp_path / "data").mkdir()
    conf = conf.replace("/etc/redis-auth/", f"{tmp_path}/auth/").replace(
        "dir /data", f"dir {tmp_path}/data"
    )
    (tmp_path / "redis.conf").write_text(conf)
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", str(tmp_path / "redis.conf"), "--port", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        yield server, port, secret
    finally:
        server.terminate()
        server.wait(10)


def test_the_rendered_configuration_runs_with_the_password_and_the_memory_ceiling(
    bundled_redis: tuple[subprocess.Popen[bytes], int, Obj],
) -> None:
    server, port, secret = bundled_redis
    password = base64.b64decode(secret["redis-password"]).decode()
    assert password == PASSWORD
    client = redis.Redis(port=port, password=password, socket_timeout=5)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline and server.poll() is None, "redis did not start"
            time.sleep(0.1)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, socket_timeout=5).set("k", "v")
    assert client.config_get("maxmemory") == {"maxmemory": str(192 * 1024 * 1024)}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert client.config_get("appendonly") == {"appendonly": "no"}
    cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
    assert PASSWORD.encode() not in cmdline
    client.close()
