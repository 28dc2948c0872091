"""Pipelines users bring, through real workers, PostgreSQL, Redis and the API as a process: a
Python pipeline from an installed package and a pipeline file each end `done` in both lanes,
and a worker killed in the middle of a fan-out step re-sends only the items in flight."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline_package"
CLAIM_FORM = """CLAIM FORM
Claimant: Jordan Example
Lines:
- Windscreen replacement: 420.00
- Towing: 95.50
- Rental car, 4 days: 180.00
"""
ENDED = ("done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded")


@pytest.fixture(scope="module")
def installed_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/pipeline_package installed the way a team installs theirs, into a folder the
    processes under test get on their PYTHONPATH (the test venv stays as it is)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(PACKAGE),
        ],
        check=True,
        timeout=300,
    )
    return target


def calls(db: Database, run_id: str, step: str, status: str, what: str = "count(*)") -> int:
    """How many call-log rows of the run's step have ``status`` (or ``what`` of them)."""
    sql = f"SELECT {what} FROM llm_call_log WHERE run_id = %s AND step = %s AND status = %s"
    return int(scalar(db, sql, run_id, step, status))


def run_through_api(api: str, document_id: str, text: str, pipeline: str, lane: str) -> str:
    stored = httpx.put(
        f"{api}/documents/{document_id}",
        content=text.encode(),
        headers={"Content-Type": "text/plain"},
        timeout=10,
    )
    assert stored.status_code in (200, 201), stored.text
    started = httpx.post(
        f"{api}/documents/{document_id}/extract",
        json={"pipeline": pipeline, "lane": lane},
        headers={"Idempotency-Key": f"{document_id}-{lane}"},
        timeout=10,
    )
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def final_status(api: str, run_id: str) -> dict[str, object]:
    def ended() -> dict[str, object] | None:
        body: dict[str, object] = httpx.get(f"{api}/runs/{run_id}", timeout=10).json()
        return body if body["status"] in ENDED else None

    found: dict[str, object] = wait_until(ended, timeout_s=120, every_s=0.2)
    return found


def test_a_python_pipeline_from_an_installed_package_ends_done_in_both_lanes(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    installed_package: Path,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    env = {"PYTHONPATH": str(installed_package)}
    api = start_api(**env)
    start_worker("interactive", **env)
    start_worker("batch", **env)
    start_beat(**env)
    listed = httpx.get(f"{api}/pipelines", timeout=10).json()["pipelines"]
    assert any(
        p["key"] == "claims:v1" and p["source"].startswith("entry point claims") for p in listed
    )
    for lane in ("interactive", "batch"):
        run_id = run_through_api(api, f"claim-{lane}", CLAIM_FORM, "claims:v1", lane)
        status = final_status(api, run_id)
        assert status["status"] == "done", status
        result = status["result"]
        assert isinstance(result, dict)
        lines = result["read_claim"]["lines"]
        assert len(result["check_lines"]["checks"]) == len(lines)
        assert result["route"] == {
            "queue": "fast" if sum(line["amount"] for line in lines) < 1000 else "review",
            "lines": len(lines),
        }
        # The code-only step asked no model.
        assert (
            scalar(
                db, "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND step = 'route'", run_id
            )
            == 0
        )


NDA = """MUTUAL NON-DISCLOSURE AGREEMENT

1. DEFINITION
Confidential Information means information marked as confidential.

2. TERM
The obligations continue without limit in time.

3. REMEDIES
The receiving party shall pay liquidated damages of 500,000 for each breach.
"""


def test_the_nda_pipeline_file_ends_done_in_both_lanes(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_worker("interactive")
    start_worker("batch")
    start_beat()
    for lane in ("interactive", "batch"):
        run_id = run_through_api(api, f"nda-{lane}", NDA, "nda_review:v1", lane)
        status = final_status(api, run_id)
        assert status["status"] == "done", status
        result = status["result"]
        assert isinstance(result, dict)
        clauses = result["clauses"]["clauses"]
        assert len(result["risks"]["items"]) == len(clauses) >= 1
        assert result["verdict"]["verdict"] in ("sign", "negotiate", "reject")
        assert calls(db, run_id, "risks", "ok") == len(clauses), "one call per clause"


FAN_OUT = """\
name: fan_out
version: 1
defaults: {model: gpt-4o-mini}
steps:
  - name: parts
    kind: ask
    prompt: "{{ document }}"
    output_schema:
      type: object
      required: [parts]
      additionalProperties: false
      properties:
        parts:
          type: array
          minItems: 12
          maxItems: 12
          items: {type: string}
  - name: per_part
    kind: map
    over: outputs.parts.parts
    concurrency: 3
    max_items: 12
    prompt: "{{ index }}: {{ item }}"
    output_schema:
      type: object
      required: [ok]
      additionalProperties: false
      properties: {ok: {type: boolean}}
"""


def test_a_worker_killed_in_a_fan_out_re_sends_only_the_items_in_flight(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    tmp_path: Path,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "fan_out.yaml").write_text(FAN_OUT, encoding="utf-8")
    env = {"DOCPIPE_PIPELINES_DIR": str(folder)}
    api = start_api(**env)
    start_beat(**env)
    worker = start_worker("interactive", concurrency=1, **env)
    fake_llm.configure(latency_ms=[400, 600])
    run_id = run_through_api(api, "parts", "twelve parts, please", "fan_out:v1", "interactive")
    wait_until(lambda: calls(db, run_id, "per_part", "ok") >= 4, timeout_s=120, every_s=0.05)
    worker.kill_group()  # SIGKILL mid-step: some items answered, up to 3 on the wire
    answered = calls(db, run_id, "per_part", "ok")
    in_flight = calls(db, run_id, "per_part", "sent")
    assert 4 <= answered < 12 and in_flight <= 3
    start_worker("interactive", concurrency=1, **env)
    assert final_status(api, run_id)["status"] == "done"
    # The fake counts the calls of a step without a docpipe-step header as "json_schema":
    # here the one call of "parts" and those of "per_part".
    sent = fake_llm.stats()["by_step"]["json_schema"] - calls(db, run_id, "parts", "ok")
    # Every item was paid once, plus at most the ones on the wire when the worker died.
    assert 12 <= sent <= 12 + in_flight
    assert calls(db, run_id, "per_part", "ok", what="count(DISTINCT call_key)") == 12
    assert calls(db, run_id, "per_part", "ok") == 12
