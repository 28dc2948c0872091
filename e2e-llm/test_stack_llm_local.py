"""``docpipe stack up --llm local``: the local stack with llama.cpp's server in place of the
fake provider, as a newcomer starts it to see a real model answer a pipeline, their own
included (the tutorial's; tests/integration/test_tutorial.py runs the rest of it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from docpipe.cli.client import DocpipeClient
from docpipe_dev.localstack import free_port
from tests.integration.test_tutorial import SAVE_AS, blocks

SHORT_NDA = """MUTUAL NON-DISCLOSURE AGREEMENT

This Agreement is made on 7 May 2025 between Acme Ltd and Borealis SAS.

1. Confidential Information. Each party shall keep the other's information secret.
2. Term. The obligations last three (3) years from the date above.
"""


def docpipe(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCPIPE_")}
    return subprocess.run(
        [sys.executable, "-m", "docpipe.cli", *args],
        env={**env, "DOCPIPE_STACK_DIR": str(state)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture
def state() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="docpipe-llm-local-") as name:
        path = Path(name)
        path.chmod(0o711)  # PostgreSQL's user must reach it when we are root
        try:
            yield path
        finally:
            docpipe(path, "stack", "down")


def test_stack_up_llm_local_answers_a_pipeline_with_the_real_model(state: Path) -> None:
    port = free_port()
    started = docpipe(
        state,
        "stack",
        "up",
        "--detach",
        "--llm",
        "local",
        f"--api-port={port}",
        "--metrics-port=0",
        "--interactive-concurrency=1",
        "--batch-concurrency=1",
    )
    assert started.returncode == 0, started.stderr + started.stdout
    assert "answers from llama.cpp's server with SmolLM2" in started.stdout
    key = re.search(r"(dp_\S+)", started.stdout)
    assert key is not None
    status = docpipe(state, "stack", "status")
    assert re.search(r"llm-local\s+pid \d+\s+running", status.stdout), status.stdout
    with DocpipeClient(f"http://127.0.0.1:{port}", api_key=key[1], timeout_s=60) as client:
        client.put_document("nda", SHORT_NDA)
        run_id = client.extract("nda", pipeline="nda_review:v1")["run_id"]
        deadline = time.monotonic() + 20 * 60
        while (run := client.run(run_id))["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, run
            time.sleep(3)
    assert run["status"] == "done", run
    answered = [s for s in run["steps"] if s["model"]]
    assert answered and all(s["input_tokens"] and s["output_tokens"] for s in answered)
    assert run["cost_so_far_usd"] == 0, "a model on this machine costs nothing"
    assert set(run["result"]["verdict"]) >= {"verdict"}
    print(f"\n--llm local: nda_review over a short NDA: {run['result']['verdict']}")


def test_the_tutorials_own_pipeline_answered_by_the_real_model(state: Path, tmp_path: Path) -> None:
    """Step 5 of the tutorial (docs/getting-started/tutorial.md), its last stack: the
    tutorial's pipeline file, the stack started by the tutorial's own ``--llm local`` line,
    a sample contract submitted and its result shown by the commands the tutorial gives."""
    tutorial = blocks()
    [pipeline] = [b for b in tutorial if b.kind == "yaml"]
    [start] = [
        line
        for b in tutorial
        if b.kind == "sh"
        for line in b.text.splitlines()
        if "--llm local" in line
    ]
    folder = tmp_path / "docpipe-tutorial"
    (folder / "pipelines").mkdir(parents=True)
    (folder / SAVE_AS.findall(pipeline.before)[-1]).write_text(pipeline.text, encoding="utf-8")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCPIPE_")}
    if server := env.get("LLAMA_SERVER_PYTHON"):  # make e2e-llm's, relative to the checkout
        env["LLAMA_SERVER_PYTHON"] = str(Path(server).absolute())
    env |= {
        "DOCPIPE_STACK_DIR": str(state),
        "DOCPIPE_API_URL": f"http://127.0.0.1:{port}",
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
    }

    def sh(line: str) -> str:
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=1500,
            check=False,
        )
        assert done.returncode == 0, f"$ {line}\n{done.stdout}"
        return done.stdout

    started = sh(
        start.replace(
            "docpipe stack up",
            f"docpipe stack up --api-port={port} --metrics-port=0 "
            "--interactive-concurrency=1 --batch-concurrency=1",
        )
    )
    assert "answers from llama.cpp's server with SmolLM2" in started
    key = re.search(r"(dp_\S+)", started)
    assert key is not None
    env["DOCPIPE_API_KEY"] = key[1]
    assert "contract_brief:v1" in sh("docpipe pipelines list")
    sh("docpipe samples contracts --count 2")
    submitted = sh("docpipe submit contracts/02-*.txt --pipeline contract_brief:v1 --watch")
    run_id = re.search(r"[0-9a-f]{8}-[0-9a-f-]{27}", submitted)
    assert run_id is not None, submitted
    shown = sh(f"docpipe results {run_id[0]}")
    assert "brief (the last step's output)" in shown, shown
    with DocpipeClient(env["DOCPIPE_API_URL"], api_key=key[1], timeout_s=60) as client:
        run = client.run(run_id[0])
    assert run["status"] == "done", run
    answered = [s for s in run["steps"] if s["model"]]
    assert [s["step"] for s in answered] == ["parties", "brief"], answered
    assert all(s["input_tokens"] and s["output_tokens"] for s in answered)
    assert run["result"]["brief"]["brief"].strip()
    print(f"\n--llm local, the tutorial's contract_brief: {run['result']['brief']['brief']!r}")
