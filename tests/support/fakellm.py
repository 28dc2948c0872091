"""Start the fake LLM provider as a real subprocess and drive its ``/control`` API.

with start_fake_llm(rpm=60, burst=1) as fake:
    fake.add_fault("429", count=2, step="extract_fields")
    ...  # point the client at fake.url + "/v1"
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from docpipe_dev.processes import ManagedProcess, fake_llm_argv

__all__ = ["FakeLLM", "free_port", "start_fake_llm"]

HOST = "127.0.0.1"


class FakeLLM:
    """A running fake provider: ``url`` is its base URL (the OpenAI base URL is ``url + "/v1"``)."""

    def __init__(self, process: ManagedProcess, port: int, log_dir: Path) -> None:
        self.process = process
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self._log_dir = log_dir

    def control(self, method: str, path: str, json: Any = None) -> Any:
        """Call a control endpoint and return its decoded JSON; raise on an error status."""
        response = httpx.request(method, self.url + path, json=json, timeout=10)
        response.raise_for_status()
        return response.json()

    def add_fault(
        self,
        kind: str,
        count: int = 1,
        *,
        step: str | None = None,
        model: str | None = None,
        retry_after: float | None = None,
        hang_s: float | None = None,
    ) -> dict[str, Any]:
        spec = {
            "kind": kind,
            "count": count,
            "step": step,
            "model": model,
            "retry_after": retry_after,
            "hang_s": hang_s,
        }
        fault: dict[str, Any] = self.control("POST", "/control/faults", json=spec)
        return fault

    def pending_faults(self) -> list[dict[str, Any]]:
        faults: list[dict[str, Any]] = self.control("GET", "/control/faults")["faults"]
        return faults

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Change ``latency_ms`` ([low, high]), ``rpm`` or ``burst`` of the running provider."""
        config: dict[str, Any] = self.control("POST", "/control/config", json=settings)
        return config

    def reset(self) -> None:
        """Back to the start-up flags, with no faults and zeroed stats."""
        self.control("POST", "/control/reset")

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.control("GET", "/control/stats")
        return stats

    def log_text(self) -> str:
        return self.process.log_text()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the provider, wait for it, and return its exit code."""
        code = self.process.stop(timeout_s)
        shutil.rmtree(self._log_dir, ignore_errors=True)
        return code

    def __enter__(self) -> FakeLLM:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def start_fake_llm(
    port: int | None = None, *, ready_timeout_s: float = 20.0, **flags: Any
) -> FakeLLM:
    """Start ``python -m docpipe_fake_llm`` and return once ``/healthz`` answers.

    ``flags`` are the command-line flags without dashes: ``latency_ms="300:1500"`` (or a
    ``(low, high)`` pair), ``rpm=60``, ``burst=1``, ``api_key="secret"``.
    """
    port = port or free_port()
    latency = flags.pop("latency_ms", "0:0")
    if isinstance(latency, tuple | list):
        latency = f"{latency[0]}:{latency[1]}"
    argv = fake_llm_argv(host=HOST, port=port, latency_ms=latency, rpm=int(flags.pop("rpm", 0)))
    for name, value in flags.items():
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    log_dir = Path(tempfile.mkdtemp(prefix="docpipe-fake-llm-"))
    process = ManagedProcess("fake-llm", argv, log_dir / "fake-llm.log").start()
    fake = FakeLLM(process, port, log_dir)
    try:
        _wait_until_healthy(fake, ready_timeout_s)
    except BaseException:
        fake.stop()
        raise
    return fake


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_healthy(fake: FakeLLM, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not fake.process.alive():
            raise RuntimeError(f"fake LLM exited early:\n{fake.log_text()[-3000:]}")
        try:
            if httpx.get(fake.url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.05)
    raise TimeoutError(f"fake LLM not healthy within {timeout_s}s:\n{fake.log_text()[-3000:]}")
