"""The ``docpipe`` command as a subprocess against a real API, workers and beat."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import redis
from cryptography.fernet import Fernet

from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests import document_files as files
from tests.factories import scalar
from tests.fakellm import FakeLLM
from tests.processes import wait_until
from tests.servers import cutting_proxy


def docpipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "docpipe.cli", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_samples_are_written_as_text_files(tmp_path: Path) -> None:
    done = docpipe("samples", str(tmp_path), "--count", "3", "--with-dummy")
    assert done.returncode == 0, done.stderr
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 4
    assert files[0].startswith("00-dummy")
    assert (tmp_path / files[1]).read_text().count("\n") > 50


def test_migrate_is_idempotent_from_the_command_line(database_url: str) -> None:
    env = {"DOCPIPE_DATABASE_URL": database_url}
    output = docpipe("migrate", env=env).stdout.strip().splitlines()
    assert output == ["schema is up to date", "pipelines: document_extract:v1, nda_review:v1"]


def test_submit_watch_and_status_over_the_api(
    db: Database, broker: object, fake_llm: FakeLLM, tmp_path: Path,
    start_api: Callable[..., str], start_worker: Callable[..., ManagedProcess],
) -> None:  # fmt: skip
    api = start_api()
    start_worker()
    samples = tmp_path / "samples"  # tmp_path also holds the processes' logs
    assert docpipe("samples", str(samples), "--count", "2", "--with-dummy").returncode == 0
    files = sorted(str(p) for p in samples.iterdir())
    submitted = docpipe("submit", *files, "--watch", "--api", api)
    # The dummy document fails on purpose (empty), so the command reports a failure ...
    assert submitted.returncode == 1, submitted.stderr
    assert "docpipe results" in submitted.stdout
    assert "the document is empty" in submitted.stdout
    # ... and every contract is done.
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'done'") == 2
    run_id = str(scalar(db, "SELECT id FROM pipeline_run WHERE status = 'done' LIMIT 1"))
    status = docpipe("status", run_id, "--api", api)
    assert '"status": "done"' in status.stdout
    again = docpipe("submit", *files, "--api", api)  # the same files: the same runs
    assert again.returncode == 0
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 3, "idempotent submission"


def test_batch_submit_watch_and_cancel(
    db: Database, broker: object, fake_llm: FakeLLM, tmp_path: Path,
    start_api: Callable[..., str], start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:  # fmt: skip
    api = start_api()
    start_worker("batch", DOCPIPE_BATCH_ADMISSION_WINDOW="2")
    start_beat(DOCPIPE_BATCH_ADMISSION_WINDOW="2")
    assert docpipe("samples", str(tmp_path / "a"), "--count", "3").returncode == 0
    watched = docpipe("batch", "submit", str(tmp_path / "a"), "--watch", "--api", api)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "done: {'done': 3}" in watched.stdout.replace("\n", " ")

    fake_llm.configure(latency_ms=[300, 300])
    assert docpipe("samples", str(tmp_path / "b"), "--count", "8", "--seed", "1").returncode == 0
    submitted = docpipe("batch", "submit", str(tmp_path / "b"), "--api", api)
    batch_id = submitted.stdout.split()[1].rstrip(":")
    cancelled = docpipe("batch", "cancel", batch_id, "--api", api)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled" in cancelled.stdout
    assert scalar(db, "SELECT status FROM batch WHERE id = %s", batch_id) == "cancelled"
    again = docpipe("batch", "cancel", batch_id, "--api", api)
    assert again.returncode == 2
    assert "409" in again.stdout


def test_webhook_secret_rotate_prints_the_secret_once_and_show_never(
    db: Database, broker: object, start_api: Callable[..., str]
) -> None:
    api = start_api(DOCPIPE_WEBHOOKS_ENABLED="true",
                    DOCPIPE_SECRETS_KEY=Fernet.generate_key().decode())  # fmt: skip
    first = docpipe("webhook-secret", "rotate", "--api", api)
    assert first.returncode == 0, first.stderr
    secret = first.stdout.strip()
    assert secret.startswith("whsec_") and "shown only now" in first.stderr
    second = docpipe("webhook-secret", "rotate", "--previous-valid-for", "600", "--api", api)
    assert second.stdout.strip() != secret
    shown = docpipe("webhook-secret", "show", "--api", api)
    assert shown.returncode == 0, shown.stderr
    assert "previous secret whs_" in shown.stdout and "signs too until" in shown.stdout
    assert secret not in shown.stdout + shown.stderr


def test_watching_twenty_runs_stays_under_the_keys_rate_limit_and_finishes(
    db: Database, broker: redis.Redis, fake_llm: FakeLLM, tmp_path: Path,
    start_api: Callable[..., str], start_worker: Callable[..., ManagedProcess],
) -> None:  # fmt: skip
    """One GET /runs?ids=... per poll (every second) for all of them: at most 60 requests a
    minute however many runs, where a request per run and poll would make 20 a poll and
    pass the limit within seconds (the counters count refused requests too)."""
    rpm = 60
    api = start_api(DOCPIPE_AUTH="keys", DOCPIPE_API_KEY_RPM=str(rpm))
    submitter, watcher = create_api_key(db, "default"), create_api_key(db, "default")
    samples = tmp_path / "samples"
    assert docpipe("samples", str(samples), "--count", "20").returncode == 0
    files = sorted(str(p) for p in samples.iterdir())
    submitted = docpipe("submit", *files, "--api", api, "--api-key", submitter.plaintext)
    run_ids = [line.split()[0] for line in submitted.stdout.splitlines()]
    assert len(run_ids) == 20, submitted.stdout + submitted.stderr
    start_worker(concurrency=2)  # the runs go on while they are watched

    watched = docpipe("watch", *run_ids, "--api", api, "--api-key", watcher.plaintext)

    assert watched.returncode == 0, watched.stdout[-2000:] + watched.stderr[-2000:]
    assert "docpipe results" in watched.stdout
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'done'") == 20
    # The watching key's request counters (one per minute window, docpipe_api.bounds).
    counts = [int(broker.get(k) or 0)
              for k in broker.scan_iter(f"docpipe:api-rate:key:{watcher.key.id}:*")]  # fmt: skip
    assert counts and max(counts) <= rpm, counts
    print(f"watch requests per minute window for 20 runs: {counts}")


def _mixed_files(folder: Path) -> dict[str, str]:
    """Two good files and one of each refusal, by name: what the command must say of it."""
    folder.mkdir()
    contract = sample_contracts(1)[0]
    (folder / "contract.txt").write_text(contract.text, encoding="utf-8")
    (folder / "contract.pdf").write_bytes(files.contract_as("pdf", contract.text))
    (folder / "scan.pdf").write_bytes(files.contract_as("scan", contract.text))
    (folder / "photo.docx").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    (folder / "bomb.docx").write_bytes(files.docx_declaring_a_bomb())
    (folder / "latin1.txt").write_bytes("Vertrag über Lieferungen".encode("latin-1"))
    return {
        "scan.pdf": "HTTP 413: the body is larger than the limit of 30000 bytes for a PDF "
                    "(DOCPIPE_MAX_PDF_BYTES)",
        "photo.docx": "HTTP 415: send a PDF or DOCX file",
        "bomb.docx": "HTTP 422: the DOCX cannot be read: decompression_bomb",
        "latin1.txt": "not UTF-8 text",
    }  # fmt: skip


def _assert_each_refusal_named(stderr: str, folder: Path, refusals: dict[str, str]) -> None:
    assert "2 of 6 files submitted, 4 refused" in stderr, stderr
    refused_lines = [line for line in stderr.splitlines() if line.startswith("refused ")]
    assert len(refused_lines) == 4, stderr
    for name, reason in refusals.items():
        assert any(f"{folder / name}: {reason}" in line for line in refused_lines), (name, stderr)


def test_submit_names_each_refused_file_goes_on_and_fails_in_the_end(
    db: Database, tmp_path: Path, start_api: Callable[..., str]
) -> None:
    api = start_api(DOCPIPE_MAX_PDF_BYTES="30000")
    refusals = _mixed_files(tmp_path / "mixed")
    names = sorted((tmp_path / "mixed").iterdir())
    submitted = docpipe("submit", *map(str, names), "--api", api)
    assert submitted.returncode == 1, submitted.stdout + submitted.stderr
    _assert_each_refusal_named(submitted.stderr, tmp_path / "mixed", refusals)
    # stdout stays one line per run started, for scripts; the files after a refusal went on.
    started = sorted(line.split()[1] for line in submitted.stdout.splitlines())
    assert started == ["contract", "contract.pdf"]
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 2
    assert scalar(db, "SELECT count(*) FROM document") == 2


def test_batch_submit_names_each_refused_file_and_submits_the_others(
    db: Database, tmp_path: Path, start_api: Callable[..., str]
) -> None:
    api = start_api(DOCPIPE_MAX_PDF_BYTES="30000")
    refusals = _mixed_files(tmp_path / "mixed")
    submitted = docpipe("batch", "submit", str(tmp_path / "mixed"), "--api", api)
    assert submitted.returncode == 1, submitted.stdout + submitted.stderr
    _assert_each_refusal_named(submitted.stderr, tmp_path / "mixed", refusals)
    assert "2 documents" in submitted.stdout
    assert scalar(db, "SELECT count(*) FROM batch") == 1
    with db.session() as s:
        ids = sorted(r["document_id"] for r in s.conn.execute(
            b"SELECT document_id FROM pipeline_run").fetchall())  # fmt: skip
    assert ids == ["contract", "contract.pdf"]


def test_review_list_show_and_decisions_from_the_command_line(
    db: Database, broker: object, fake_llm: FakeLLM, tmp_path: Path,
    start_api: Callable[..., str], start_worker: Callable[..., ManagedProcess],
) -> None:  # fmt: skip
    api = start_api()
    start_worker()
    fake_llm.add_fault("invented_quote", count=100, step="extract_fields")
    samples = tmp_path / "samples"
    assert docpipe("samples", str(samples), "--count", "2").returncode == 0
    submitted = docpipe("submit", *sorted(map(str, samples.iterdir())), "--watch", "--api", api)
    assert submitted.returncode == 1, submitted.stdout  # both wait for a person
    waiting = scalar(db, "SELECT array_agg(id::text ORDER BY review_since, id) FROM pipeline_run "
                     "WHERE status = 'needs_review'")  # fmt: skip
    assert len(waiting) == 2
    listed = docpipe("review", "list", "--reason", "rule", "--api", api)
    assert listed.returncode == 0, listed.stderr
    assert all(run_id in listed.stdout for run_id in waiting)
    shown = docpipe("review", "show", waiting[0], "--api", api)
    assert "waits at step extract_fields" in shown.stdout and "NOT in the document" in shown.stdout
    fake_llm.reset()
    edits = tmp_path / "edits.json"
    edits.write_text('[{"path": "/fields/governing_law", "action": "correct", "value": "Ohio"}]')
    approved = docpipe("review", "approve", waiting[0], "--edit", str(edits),
                       "--set", "/fields/term_months=24", "--api", api)  # fmt: skip
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "approve recorded" in approved.stdout
    rejected = docpipe("review", "reject", waiting[1], "--reason", "a test", "--api", api)
    assert rejected.returncode == 0 and "the run is failed" in rejected.stdout
    stale = docpipe("review", "reject", waiting[1], "--reason", "again", "--revision", "1",
                    "--api", api)  # fmt: skip
    assert stale.returncode == 2 and "HTTP 409" in stale.stdout
    diff = scalar(db, "SELECT diff FROM review_decision WHERE action = 'approve'")
    assert {(d["path"], d["after"]) for d in diff} >= {("/fields/governing_law", "Ohio"),
                                                       ("/fields/term_months", 24)}  # fmt: skip


def test_batch_results_download_resumes_after_the_connection_drops(
    db: Database, broker: object, tmp_path: Path, start_api: Callable[..., str]
) -> None:
    """The export through a proxy that drops the first connection part-way through a line:
    the command resumes after the last run it wrote whole, and the file holds every run
    once, as one uninterrupted download would. The dropped download gave its export slot
    (one, here) and its PostgreSQL connection back."""
    api = start_api(DOCPIPE_MAX_RESULT_EXPORTS="1")
    documents = [{"id": f"d-{i:03}", "text": f"CONTRACT {i}\nThe parties agree."}
                 for i in range(300)]  # fmt: skip
    batch_id = httpx.post(f"{api}/batches", json={"documents": documents}).json()["batch_id"]
    for fmt, cut_after in (("jsonl", 50_000), ("csv", 10_000)):
        whole = httpx.get(f"{api}/batches/{batch_id}/results", params={"format": fmt}).content
        assert len(whole) > 2 * cut_after
        output = tmp_path / f"results.{fmt}"
        with cutting_proxy(api, cut_after=cut_after) as (proxy, connections):
            done = docpipe("batch", "results", batch_id, "--format", fmt, "-o", str(output),
                           "--api", proxy)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(connections) == 2, "cut once, resumed once"
        assert f"batch {batch_id}: 300 runs written to {output}" in done.stderr
        assert output.read_bytes() == whole, f"{fmt}: every run once, in order"
    exporting = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'docpipe-export'"
    wait_until(lambda: scalar(db, exporting) == 0, timeout_s=10)
    filtered = docpipe("batch", "results", batch_id, "--status", "pending", "--api", api)
    assert len(filtered.stdout.splitlines()) == 300, "to standard output"
    refused = docpipe("batch", "results", batch_id, "--status", "finished", "--api", api)
    assert refused.returncode == 2 and "422" in refused.stdout
