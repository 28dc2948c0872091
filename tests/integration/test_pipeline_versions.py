"""Definitions that cannot drift, and pipelines that must load: a changed definition under a
version that active runs use is refused (state check, `docpipe migrate`, the API at start-up),
a worker sends a run whose definition it does not have to review, and a broken file stops
the worker before it takes any message. Real PostgreSQL, Redis, uvicorn and celery workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from textwrap import dedent

import pytest

from docpipe.pipelines import PipelineError
from docpipe.pipelines.catalog import load_catalog
from docpipe.settings import Settings
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.definitions import check_running_definitions
from docpipe.state.documents import put_document
from docpipe_dev.processes import ManagedProcess, worker_argv
from tests.support.factories import TENANT, scalar
from tests.support.processes import ProcessFactory, wait_until

PIPELINE_V1 = dedent(
    """\
    name: invoice_check
    version: 1
    defaults: {model: gpt-4o-mini}
    steps:
      - name: total
        kind: ask
        instructions: Add up the invoice.
        prompt: "{{ document }}"
        output_schema: {type: object, required: [total], properties: {total: {type: number}}}
    """
)
CHANGED_V1 = PIPELINE_V1.replace("Add up the invoice.", "Add up the invoice, taxes included.")


def exit_code(process: ManagedProcess) -> int:
    assert process.proc is not None
    return process.proc.wait(timeout=60)


def pipelines_dir(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "pipelines"
    folder.mkdir(exist_ok=True)
    (folder / "invoice.yaml").write_text(text, encoding="utf-8")
    return folder


def start_invoice_run(db: Database, folder: Path) -> str:
    pipeline = load_catalog(Settings(pipelines_dir=folder)).get("invoice_check:v1")
    with db.transaction() as tx:
        put_document(tx, TENANT, "inv-1", "Desk 20, lamp 10.")
        created = runs.create_run(
            tx,
            tenant_id=TENANT,
            document_id="inv-1",
            pipeline=pipeline,
            lane="interactive",
            idempotency_key="inv-1",
            request={"document_id": "inv-1"},
        )
    return created.run_id


def test_a_changed_definition_under_an_active_version_is_refused_naming_the_runs(
    db: Database, tmp_path: Path
) -> None:
    run_id = start_invoice_run(db, pipelines_dir(tmp_path, PIPELINE_V1))
    same = load_catalog(Settings(pipelines_dir=tmp_path / "pipelines"))
    check_running_definitions(db, same)  # the definition the run started with: fine
    changed = load_catalog(Settings(pipelines_dir=pipelines_dir(tmp_path, CHANGED_V1)))
    with pytest.raises(
        PipelineError, match=rf"invoice_check:v1 .* 1 active run\(s\), e\.g\. {run_id}"
    ):
        check_running_definitions(db, changed)
    without = load_catalog(Settings())
    with pytest.raises(
        PipelineError,
        match=rf"invoice_check:v1 is used by 1 active run\(s\), e\.g\. {run_id}, but is not loaded",
    ):
        check_running_definitions(db, without)
    # A new version beside the old one is fine; once the run has ended, so is the change.
    runs.cancel_run(db, TENANT, run_id)
    check_running_definitions(db, changed)


def test_docpipe_migrate_fails_on_a_drifted_definition(
    db: Database, database_url: str, tmp_path: Path
) -> None:
    start_invoice_run(db, pipelines_dir(tmp_path, PIPELINE_V1))
    pipelines_dir(tmp_path, CHANGED_V1)
    env = {
        **os.environ,
        "DOCPIPE_DATABASE_URL": database_url,
        "DOCPIPE_PIPELINES_DIR": str(tmp_path / "pipelines"),
    }
    migrate = [sys.executable, "-m", "docpipe.cli", "migrate"]
    refused = subprocess.run(migrate, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "pipelines refused" in refused.stdout
    assert "not the definition 1 active run(s)" in refused.stdout.replace("\n", " ")
    pipelines_dir(tmp_path, PIPELINE_V1)
    accepted = subprocess.run(migrate, env=env, capture_output=True, text=True, timeout=120)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "invoice_check:v1" in accepted.stdout


def test_the_api_does_not_start_on_a_drifted_definition(
    db: Database, tmp_path: Path, start_process: ProcessFactory
) -> None:
    from docpipe_dev.localstack import free_port
    from docpipe_dev.processes import api_argv

    run_id = start_invoice_run(db, pipelines_dir(tmp_path, PIPELINE_V1))
    folder = pipelines_dir(tmp_path, CHANGED_V1)
    api = start_process(
        "api", api_argv(host="127.0.0.1", port=free_port()), None, DOCPIPE_PIPELINES_DIR=str(folder)
    )
    assert exit_code(api) != 0
    log = api.log_path.read_text()
    assert (
        "invoice_check:v1" in log
        and run_id in log
        and "give the changed definition a new version" in log
    )


def test_a_broken_pipeline_file_stops_the_worker_before_it_takes_a_message(
    tmp_path: Path, start_process: ProcessFactory
) -> None:
    folder = pipelines_dir(tmp_path, PIPELINE_V1.replace("{{ document }}", "{{ documnet }}"))
    worker = start_process(
        "worker", worker_argv("interactive", concurrency=1), None, DOCPIPE_PIPELINES_DIR=str(folder)
    )
    assert exit_code(worker) != 0
    log = worker.log_path.read_text()
    assert f"{folder / 'invoice.yaml'}:8: step 'total': documnet: unknown variable" in log
    assert "ready." not in log


def test_a_worker_without_the_run_s_definition_sends_it_to_review_without_a_call(
    db: Database,
    broker: object,
    fake_llm: object,
    publisher: object,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    from docpipe.state.outbox import publish_outbox

    run_id = start_invoice_run(db, pipelines_dir(tmp_path, PIPELINE_V1))
    outbox = scalar(db, "SELECT array_agg(id) FROM outbox WHERE run_id = %s", run_id)
    # This worker loaded another definition of invoice_check:v1 (a second deploy).
    start_worker(DOCPIPE_PIPELINES_DIR=str(pipelines_dir(tmp_path, CHANGED_V1)))
    publish_outbox(db, publisher, outbox)  # type: ignore[arg-type]

    def ended() -> str | None:
        status = scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id)
        return None if status in ("queued", "running") else str(status)

    status = wait_until(ended, timeout_s=60)
    assert status == "needs_review"
    error = scalar(db, "SELECT error FROM pipeline_run WHERE id = %s", run_id)
    assert error == "pipeline invoice_check:v1 changed since the run started"
    assert scalar(db, "SELECT count(*) FROM llm_call_log WHERE run_id = %s", run_id) == 0


def test_the_api_lists_its_pipelines_and_refuses_unknown_ones(
    make_api_client: Callable[..., object], tmp_path: Path
) -> None:
    client = make_api_client(pipelines_dir=pipelines_dir(tmp_path, PIPELINE_V1))
    listed = client.get("/pipelines").json()["pipelines"]  # type: ignore[attr-defined]
    assert [p["key"] for p in listed] == [
        "document_extract:v1",
        "invoice_check:v1",
        "nda_review:v1",
    ]
    detail = client.get("/pipelines/invoice_check:v1").json()  # type: ignore[attr-defined]
    assert detail["source"].endswith("invoice.yaml")
    assert [step["name"] for step in detail["steps"]] == ["extract_text", "total"]
    assert detail["steps"][1:] == [
        {
            "name": "total",
            "kind": "ask",
            "models": ["gpt-4o-mini"],
            "prompt_version": "total@v1",
            "max_attempts": None,
            "budget_usd": None,
            "output_schema": {
                "type": "object",
                "required": ["total"],
                "properties": {"total": {"type": "number"}},
            },
        }
    ]
    missing = client.get("/pipelines/nope:v1")  # type: ignore[attr-defined]
    assert missing.status_code == 404
    assert (
        "unknown pipeline 'nope:v1' (known: document_extract:v1, invoice_check:v1"
        in missing.json()["detail"]
    )
    client.put("/documents/d1", content=b"text", headers={"Content-Type": "text/plain"})  # type: ignore[attr-defined]
    refused = client.post("/documents/d1/extract", json={"pipeline": "nope:v1"})  # type: ignore[attr-defined]
    assert refused.status_code == 422
    assert "known: document_extract:v1, invoice_check:v1, nda_review:v1" in refused.json()["detail"]
    batch = client.post("/batches", json={"pipeline": "nope:v2", "documents": [{"id": "d1"}]})  # type: ignore[attr-defined]
    assert batch.status_code == 422


def test_pipelines_validate_checks_models_against_the_providers_configured_here(
    tmp_path: Path,
) -> None:
    """Without a local stack, the models a file asks are checked against DOCPIPE_PROVIDERS,
    as a worker would check them at start-up; settings that do not load check nothing and
    say so."""
    good = pipelines_dir(tmp_path, PIPELINE_V1) / "invoice.yaml"
    rest = {k: v for k, v in os.environ.items() if not k.startswith("DOCPIPE_")}
    env = {**rest, "DOCPIPE_STACK_DIR": str(tmp_path / "no-stack")}
    validate = [sys.executable, "-m", "docpipe.cli", "pipelines", "validate", str(good)]

    def providers(*models: str) -> str:
        priced = {"input_per_mtok": 1, "output_per_mtok": 2}
        return json.dumps(
            [
                {
                    "name": "main",
                    "base_url": "http://main.test/v1",
                    "models": dict.fromkeys(models, priced),
                }
            ]
        )

    def run(**more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            validate, env=env | more, capture_output=True, text=True, timeout=60, check=False
        )

    lacking = run(DOCPIPE_PROVIDERS=providers("m1"))
    assert lacking.returncode == 1, lacking.stdout + lacking.stderr
    out = " ".join(lacking.stdout.split())
    assert "asks model 'gpt-4o-mini', which is on no provider" in out, out
    assert "(models: checked against DOCPIPE_PROVIDERS / DOCPIPE_MODEL_PRICES here)" in out
    having = run(DOCPIPE_PROVIDERS=providers("m1", "gpt-4o-mini"))
    assert having.returncode == 0 and "ok, invoice_check:v1 (total)" in having.stdout
    unloadable = run(DOCPIPE_PROVIDERS="[not json")
    assert unloadable.returncode == 0, unloadable.stdout + unloadable.stderr
    assert "(models: not checked: the provider settings here do not load" in " ".join(
        unloadable.stdout.split()
    )


def test_pipelines_validate_says_what_is_wrong_and_exits_1(tmp_path: Path) -> None:
    good = pipelines_dir(tmp_path, PIPELINE_V1) / "invoice.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(PIPELINE_V1.replace("kind: ask", "kind: fan"), encoding="utf-8")
    validate = [sys.executable, "-m", "docpipe.cli", "pipelines", "validate"]
    ok = subprocess.run([*validate, str(good)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "ok, invoice_check:v1 (total)" in ok.stdout
    wrong = subprocess.run(
        [*validate, str(good), str(bad)], capture_output=True, text=True, timeout=60
    )
    assert wrong.returncode == 1
    assert f"{bad}:6: steps/0/kind: 'fan' is not one of" in wrong.stdout.replace("\n", "")
