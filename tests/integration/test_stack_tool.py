"""The local stack as a tool: ``docpipe stack up --detach | status | down`` as subprocesses,
its API key kept across a restart, and the commands that find it without being told
(``api-key create``, ``pipelines validate``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docpipe.cli.local_stack import pid_alive
from docpipe_dev.localstack import free_port
from tests.support.servers import create_database

# Marked by hand: `docpipe stack up`, run as a subprocess, starts the workers, beat and API.
pytestmark = [pytest.mark.slow, pytest.mark.processes]

# What the stack's commands must find on their own: nothing names a database, an API or a key.
_UNSET = ("DOCPIPE_DATABASE_URL", "DOCPIPE_REDIS_URL", "DOCPIPE_API_URL", "DOCPIPE_API_KEY")
KEY_LINE = re.compile(r"API key \(tenant 'default', kept in (\S+)\): (dp_\S+)")

GOOD_PIPELINE = """\
name: brief
version: 1
defaults: {model: gpt-4o-mini}
steps:
  - name: parties
    kind: ask
    instructions: 'List the parties as {"parties": [string]}.'
    prompt: "{{ document }}"
    output_schema:
      type: object
      required: [parties]
      properties: {parties: {type: array, maxItems: 5, items: {type: string}}}
"""


def docpipe(state: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in _UNSET}
    return subprocess.run(
        [sys.executable, "-m", "docpipe.cli", *args],
        env={**clean, "DOCPIPE_STACK_DIR": str(state), "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=state,
    )


@pytest.fixture(scope="module")
def state() -> Iterator[Path]:
    # As root, PostgreSQL's user must reach the directory (pytest's tmp_path it cannot).
    with tempfile.TemporaryDirectory(prefix="docpipe-stack-tool-") as name:
        path = Path(name)
        path.chmod(0o711)
        try:
            yield path
        finally:
            docpipe(path, "stack", "down")


def up(state: Path, port: int, database_url: str | None = None) -> str:
    """``stack up --detach`` (with its own PostgreSQL unless ``database_url`` names one);
    the API key it printed."""
    given = {"DOCPIPE_DATABASE_URL": database_url} if database_url else {}
    started = docpipe(
        state,
        "stack",
        "up",
        "--detach",
        f"--api-port={port}",
        "--metrics-port=0",
        "--latency-ms=0:0",
        "--interactive-concurrency=1",
        "--batch-concurrency=1",
        **given,  # the stack's, not the commands' below
    )
    assert started.returncode == 0, started.stderr + started.stdout
    found = KEY_LINE.search(started.stdout)
    assert found, started.stdout
    assert Path(found[1]) == state.resolve() / "api-key"
    return found[2]


def can_list_pipelines(port: int, key: str) -> bool:
    answer = httpx.get(
        f"http://127.0.0.1:{port}/pipelines", headers={"Authorization": f"Bearer {key}"}
    )
    return answer.status_code == 200


def test_a_stack_in_the_background_is_found_stopped_and_keeps_its_key_on_restart(
    state: Path,
) -> None:
    # The stack's own PostgreSQL, on a port of its choosing that nothing else names: the
    # commands below must find it from the stack's record alone.
    port = free_port()
    key = up(state, port)
    assert can_list_pipelines(port, key)
    key_file = state / "api-key"
    assert key_file.read_text(encoding="utf-8").strip() == key
    assert key_file.stat().st_mode & 0o077 == 0, "the key file is its owner's alone"

    # Status: the URLs, the database, every process with its id.
    status = docpipe(state, "stack", "status")
    assert status.returncode == 0, status.stderr
    assert f"API         http://127.0.0.1:{port} (ready)" in status.stdout
    described = json.loads(docpipe(state, "stack", "status", "--json").stdout)
    database = re.search(r"database    (postgresql://\S+)", status.stdout)
    assert database and database[1] == described["database_url"], status.stdout
    assert described["database_url"].endswith("/docpipe"), described["database_url"]
    names = [p["name"] for p in described["processes"]]
    assert names == [
        "postgres",
        "redis",
        "fake-llm",
        "worker-interactive",
        "worker-batch",
        "beat",
        "api",
    ]
    assert all(described["alive"].values()) and described["api_ready"]
    pids = [p["pid"] for p in described["processes"]]
    for name, pid in zip(names, pids, strict=True):
        assert re.search(rf"{name}\s+pid {pid}\s+running", status.stdout), status.stdout

    # A second stack from the same folder is refused; it would share the databases.
    again = docpipe(state, "stack", "up", "--detach", f"--api-port={free_port()}")
    assert again.returncode == 2
    assert "a stack is running from" in again.stderr and "docpipe stack down" in again.stderr

    # api-key create finds the stack's own database without DOCPIPE_DATABASE_URL.
    created = docpipe(state, "api-key", "create", "acme", "--name", "tutorial")
    assert created.returncode == 0, created.stderr
    assert "the database of the local stack running from" in created.stderr
    acme_key = created.stdout.strip()
    assert can_list_pipelines(port, acme_key)

    # pipelines validate checks models against the stack's providers.
    (state / "good.yaml").write_text(GOOD_PIPELINE, encoding="utf-8")
    (state / "bad.yaml").write_text(GOOD_PIPELINE.replace("gpt-4o-mini", "gpt-9"), "utf-8")
    valid = docpipe(state, "pipelines", "validate", "good.yaml", "bad.yaml")
    assert valid.returncode == 1
    assert "good.yaml: ok, brief:v1 (parties)" in valid.stdout
    assert (
        "bad.yaml: step 'parties' of brief:v1 asks model 'gpt-9', which is on no provider "
        "with a price" in valid.stdout
    )
    assert "(models: checked against the local stack's providers" in valid.stdout

    # Down stops every process; the record goes, the key stays.
    down = docpipe(state, "stack", "down")
    assert down.returncode == 0, down.stderr
    assert not [pid for pid in pids if pid_alive(pid)]
    assert docpipe(state, "stack", "status").returncode == 1
    assert docpipe(state, "stack", "down").returncode == 1

    # A restart keeps the key: the commands of a tutorial go on working.
    port = free_port()
    assert up(state, port) == key
    assert can_list_pipelines(port, key) and can_list_pipelines(port, acme_key)
    assert docpipe(state, "stack", "down").returncode == 0


def test_a_stack_whose_supervisor_was_killed_is_cleaned_up_by_down(
    state: Path, postgres_admin_url: str
) -> None:
    database_url = create_database(postgres_admin_url, "docpipe_stack_tool")
    up(state, free_port(), database_url)
    described = json.loads(docpipe(state, "stack", "status", "--json").stdout)
    os.kill(described["pid"], 9)  # as an OOM kill would: its children live on
    pids = [p["pid"] for p in described["processes"]]
    down = docpipe(state, "stack", "down")
    assert down.returncode == 0, down.stderr
    assert "was gone; stopped what it left running: redis, fake-llm" in down.stdout
    assert not [pid for pid in pids if pid_alive(pid)]
