"""The probes' own process (DOCPIPE_PROBE_PORT): it answers /healthz and /readyz as the
API's routes do, says what the API's event loop does (a stopped API process fails both
probes, and passes them again once it runs), and ends with the API's process."""

from __future__ import annotations

import signal

import httpx

import docpipe
from docpipe_dev.localstack import free_port
from tests.support.processes import ProcessGroup, wait_until


def _status(url: str, path: str) -> int | None:
    try:
        return httpx.get(f"{url}{path}", timeout=10).status_code
    except httpx.TransportError:
        return None


def test_the_probes_process_follows_the_api_process(process_group: ProcessGroup) -> None:
    port = free_port()
    process_group.start_api(DOCPIPE_PROBE_PORT=str(port), DOCPIPE_PROBE_HOST="127.0.0.1")
    api, probes = process_group.started[-1], f"http://127.0.0.1:{port}"

    wait_until(lambda: _status(probes, "/healthz") == 200, timeout_s=30)
    assert httpx.get(f"{probes}/healthz").json() == {
        "status": "ok",
        "version": docpipe.__version__,
    }
    ready = httpx.get(f"{probes}/readyz")
    assert (ready.status_code, ready.json()) == (
        200,
        {"status": "ready", "checks": {"postgres": "ok"}},
    )
    assert _status(probes, "/runs") == 404, "the probes' port serves nothing else"

    # A process whose loop does not turn is neither live nor ready, however fast the
    # answer; once it runs again, both pass.
    api.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: _status(probes, "/healthz") == 503, timeout_s=60)
        unready = httpx.get(f"{probes}/readyz", timeout=10)
        assert (unready.status_code, unready.json()) == (
            503,
            {"status": "unavailable", "checks": {"api": "unavailable"}},
        )
    finally:
        api.signal(signal.SIGCONT)
    wait_until(lambda: _status(probes, "/readyz") == 200, timeout_s=60)
    assert _status(probes, "/healthz") == 200

    # Killed without a word, the API leaves no probes' process behind answering for it.
    api.signal(signal.SIGKILL)
    wait_until(lambda: _status(probes, "/healthz") is None, timeout_s=60)
