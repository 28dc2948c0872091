"""The ``docpipe`` command as a subprocess against a real API, workers and beat: what it
does, and what it says when it cannot (one line with what to do, and its exit code)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import openpyxl
import pytest
import redis
from cryptography.fernet import Fernet

from docpipe.cli.client import MAX_RETRIES
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import sample_contracts
from tests.support import document_files as files
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until
from tests.support.servers import cutting_proxy


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "docpipe.cli", *args]


def docpipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args),
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The failure's message: exactly one line on stderr, nothing on stdout."""
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


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
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    tmp_path: Path,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_worker()
    samples = tmp_path / "samples"  # tmp_path also holds the processes' logs
    assert docpipe("samples", str(samples), "--count", "2", "--with-dummy").returncode == 0
    files = sorted(str(p) for p in samples.iterdir())
    submitted = docpipe("submit", *files, "--watch", "--api", api)
    # The dummy document fails on purpose (empty), so the command reports a failure ...
    assert submitted.returncode == 1, submitted.stderr
    assert "docpipe results" in submitted.stdout
    # The dummy's row: failed, its whole note (a pipe gets the table as tab-separated lines).
    table = submitted.stdout.partition("# docpipe results\n")[2]
    dummy = next(line for line in table.splitlines() if line.startswith("00-dummy"))
    assert "\tfailed\t" in dummy and "the document is empty" in dummy, dummy
    # ... and every contract is done.
    assert scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'done'") == 2
    run_id = str(scalar(db, "SELECT id FROM pipeline_run WHERE status = 'done' LIMIT 1"))
    status = docpipe("status", run_id, "--api", api)
    assert status.stdout.startswith(f"run {run_id}  ") and "  done\n" in status.stdout
    assert "4/4 steps done" in status.stdout
    assert '"status": "done"' in docpipe("status", run_id, "--json", "--api", api).stdout

    shown = docpipe("results", run_id, "--json", "--api", api)
    assert shown.returncode == 0, shown.stderr
    [run] = json.loads(shown.stdout)
    assert run["run_id"] == run_id and run["status"] == "done"
    assert len(run["values"]) == 11 and all(v["supported"] for v in run["values"])
    table = docpipe("results", run_id, "--api", api)
    assert table.returncode == 0, table.stderr
    assert "values and their evidence" in table.stdout
    assert "summarize (the last step's output)" in table.stdout
    # Each field on a row of its own, with its quote beside it.
    for value in run["values"]:
        row = next(line for line in table.stdout.splitlines() if line.startswith(value["field"]))
        assert f"\t{value['quote'].splitlines()[0].strip()}" in row, (value, row)
    failed = str(scalar(db, "SELECT id FROM pipeline_run WHERE status = 'failed'"))
    both = docpipe("results", run_id, failed, "--api", api)
    assert both.returncode == 1, "a run that did not end done"
    assert "the document is empty" in both.stdout
    again = docpipe("submit", *files, "--api", api)  # the same files: the same runs
    assert again.returncode == 0
    assert scalar(db, "SELECT count(*) FROM pipeline_run") == 3, "idempotent submission"


def test_batch_submit_watch_and_cancel(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    tmp_path: Path,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_worker("batch", DOCPIPE_BATCH_ADMISSION_WINDOW="2")
    start_beat(DOCPIPE_BATCH_ADMISSION_WINDOW="2")
    assert docpipe("samples", str(tmp_path / "a"), "--count", "3").returncode == 0
    watched = docpipe("batch", "submit", str(tmp_path / "a"), "--watch", "--api", api)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "is done: all 3 runs done" in watched.stdout, watched.stdout

    fake_llm.configure(latency_ms=[300, 300])
    assert docpipe("samples", str(tmp_path / "b"), "--count", "8", "--seed", "1").returncode == 0
    submitted = docpipe("batch", "submit", str(tmp_path / "b"), "--api", api)
    batch_id = submitted.stdout.split()[1].rstrip(":")
    cancelled = docpipe("batch", "cancel", batch_id, "--api", api)
    assert cancelled.returncode == 0, cancelled.stderr
    # A sentence, as watch ends with: not the API's counts as a Python dict.
    assert cancelled.stdout.startswith(f"Batch {batch_id} is cancelled: "), cancelled.stdout
    assert cancelled.stdout.rstrip().endswith(".") and "{" not in cancelled.stdout
    assert scalar(db, "SELECT status FROM batch WHERE id = %s", batch_id) == "cancelled"
    again = docpipe("batch", "cancel", batch_id, "--api", api)
    assert again.returncode == 4
    assert one_line_error(again) == REFUSALS[409][1].replace(
        "stand-in 409", f"batch {batch_id} has already ended (cancelled)"
    )


def test_webhook_secret_rotate_prints_the_secret_once_and_show_never(
    db: Database, broker: object, start_api: Callable[..., str]
) -> None:
    api = start_api(
        DOCPIPE_WEBHOOKS_ENABLED="true", DOCPIPE_SECRETS_KEY=Fernet.generate_key().decode()
    )
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
    db: Database,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    tmp_path: Path,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> None:
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
    counts = [
        int(broker.get(k) or 0)
        for k in broker.scan_iter(f"docpipe:api-rate:key:{watcher.key.id}:*")
    ]
    assert counts and max(counts) <= rpm, counts
    print(f"watch requests per minute window for 20 runs: {counts}")


# --- What the command says when it cannot do what was asked ------------------------------

UNREACHABLE = (
    "error: cannot reach the docpipe API at {url} (connection refused): start one with "
    "'docpipe stack up', or point DOCPIPE_API_URL (or --api) at yours"
)


def test_an_unreachable_api_is_one_line_naming_the_url_and_what_to_do() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    listed = docpipe("pipelines", "list", env={"DOCPIPE_API_URL": url})
    assert listed.returncode == 3
    assert one_line_error(listed) == UNREACHABLE.format(url=url)
    status = docpipe("status", str(uuid.uuid4()), "--api", url)
    assert status.returncode == 3
    assert one_line_error(status) == UNREACHABLE.format(url=url)


def test_debug_shows_the_traceback_instead_of_the_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["--debug", "pipelines", "list"], ["pipelines", "list", "--debug"]):
        done = docpipe(*args, "--api", url)
        assert done.returncode == 1, args
        # The requests as they were tried (debug logging), and the whole traceback.
        assert f"connect_tcp.started host='127.0.0.1' port={url.rsplit(':', 1)[1]}" in done.stderr
        assert "Traceback (most recent call last):" in done.stderr, done.stderr[-500:]
        assert "httpx.ConnectError" in done.stderr
        assert done.stderr.rstrip().endswith(
            f"ApiUnreachable: cannot reach {url}: connection refused"
        )


def test_an_unreachable_database_and_wrong_settings_are_one_line_too() -> None:
    port = free_port()
    migrate = docpipe(
        "migrate", env={"DOCPIPE_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/x"}
    )
    assert migrate.returncode == 3
    assert one_line_error(migrate) == (
        f"error: cannot reach PostgreSQL (connection failed: connection to server at "
        f"\"127.0.0.1\", port {port} failed: Connection refused): start it ('docpipe stack up' "
        "runs one), or point DOCPIPE_DATABASE_URL at yours"
    )
    listed = docpipe("api-key", "list", env={"DOCPIPE_DATABASE_POOL_SIZE": "0"})
    assert listed.returncode == 2
    assert one_line_error(listed) == (
        "error: the settings are wrong: DOCPIPE_DATABASE_POOL_SIZE: Input should be greater "
        "than or equal to 1"
    )


class StandIn(BaseHTTPRequestHandler):
    """Answers GET /runs/<status> with that status and docpipe's error body; a 422 as
    FastAPI words a validation error, a 429 and a 503 with Retry-After: 0."""

    def do_GET(self) -> None:
        status = int(self.path.rsplit("/", 1)[-1])
        detail: object = f"stand-in {status}"
        if status == 422:
            detail = [
                {"loc": ["body", "pipeline"], "msg": "Input should be 'a:v1'", "type": "enum"}
            ]
        body = json.dumps({"detail": detail}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if status in (429, 503):
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


TRIES = MAX_RETRIES + 1
REFUSALS = {
    401: (
        4,
        "error: the API wants a valid API key (401): stand-in 401; pass your tenant's "
        "key with --api-key or DOCPIPE_API_KEY ('docpipe api-key create TENANT' makes one)",
    ),
    403: (4, "error: the API does not allow this to your key (403): stand-in 403"),
    404: (
        4,
        "error: not found (404): stand-in 404; check the id (another tenant's ids are "
        "not found either)",
    ),
    409: (4, "error: it conflicts with what is stored (409): stand-in 409"),
    413: (4, "error: too large for the API (413): stand-in 413"),
    422: (
        4,
        "error: the API refused the request as invalid (422): pipeline: Input should be 'a:v1'",
    ),
    429: (
        5,
        f"error: the API still refuses this key's requests as too many after {TRIES} "
        "tries (429): stand-in 429; wait a minute and try again (the limit is "
        "DOCPIPE_API_KEY_RPM)",
    ),
    503: (
        5,
        f"error: the API stayed unavailable after {TRIES} tries (503): stand-in 503; its "
        "database or Redis is away, try again shortly",
    ),
    500: (5, "error: the API failed (500): stand-in 500; its log says why"),
}


# Statuses the command tries again: MAX_RETRIES waits of full jitter over a doubling ceiling
# (0.5 s to 8 s) on top of Retry-After: 0, about 8 s and up to 15.5 s in all.
TRIED_AGAIN = (429, 503)


def _refusals_are_one_line(api: str, statuses: list[int]) -> None:
    """Each status asked for at once, each by a command of its own."""
    running = {
        status: subprocess.Popen(
            command("status", str(status), "--api", api),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for status in statuses
    }
    for status, proc in running.items():
        stdout, stderr = proc.communicate(timeout=120)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        assert (done.returncode, one_line_error(done)) == REFUSALS[status], status


def test_every_error_status_is_one_line_with_the_apis_detail_and_its_exit_code(
    stand_in_api: str,
) -> None:
    _refusals_are_one_line(stand_in_api, [s for s in REFUSALS if s not in TRIED_AGAIN])


@pytest.mark.slow  # waits out the command's backoff: about 8 s, up to 15.5 s
def test_a_status_tried_again_is_one_line_once_the_tries_are_spent(stand_in_api: str) -> None:
    _refusals_are_one_line(stand_in_api, list(TRIED_AGAIN))


def test_the_real_apis_refusals_are_one_line_with_its_detail(
    db: Database, broker: object, start_api: Callable[..., str]
) -> None:
    api = start_api(DOCPIPE_AUTH="keys")
    key = create_api_key(db, "acme").plaintext

    no_key = docpipe("pipelines", "list", "--api", api)
    assert no_key.returncode == 4
    assert one_line_error(no_key) == REFUSALS[401][1].replace(
        "stand-in 401", "this route needs a tenant's API key: send 'Authorization: Bearer <key>'"
    )
    with_key = {"DOCPIPE_API_KEY": key, "DOCPIPE_API_URL": api}
    unknown_run = str(uuid.uuid4())
    missing = docpipe("status", unknown_run, env=with_key)
    assert (missing.returncode, one_line_error(missing)) == (
        4,
        REFUSALS[404][1].replace("stand-in 404", f"run '{unknown_run}' does not exist"),
    )
    invalid = docpipe("review", "list", "--limit", "0", env=with_key)
    limit = "query.limit: Input should be greater than or equal to 1"
    assert (invalid.returncode, one_line_error(invalid)) == (
        4,
        REFUSALS[422][1].replace("pipeline: Input should be 'a:v1'", limit),
    )
    # 409: test_batch_submit_watch_and_cancel; a file refused with 413 is one of the files a
    # submit goes on past (test_submit_names_each_refused_file_goes_on_and_fails_in_the_end).


def _mixed_files(folder: Path) -> dict[str, str]:
    """Two good files and one of each refusal, by name: what the command must say of it."""
    folder.mkdir()
    contract = sample_contracts(1)[0]
    (folder / "contract.txt").write_text(contract.text, encoding="utf-8")
    (folder / "contract.pdf").write_bytes(files.contract_as("pdf", contract.text))
    (folder / "scan.pdf").write_bytes(files.contract_as("scan", contract.text))
    (folder / "photo.docx").write_bytes(b"GIF89a" + bytes(range(256)) * 8)
    (folder / "bomb.docx").write_bytes(files.docx_declaring_a_bomb())
    (folder / "latin1.txt").write_bytes("Vertrag über Lieferungen".encode("latin-1"))
    return {
        "scan.pdf": "HTTP 413: the body is larger than the limit of 30000 bytes for a PDF "
        "(DOCPIPE_MAX_PDF_BYTES)",
        "photo.docx": "HTTP 415: send PDF, Word (DOCX), PNG, JPEG or TIFF files",
        "bomb.docx": "HTTP 422: the DOCX cannot be read: decompression_bomb",
        # A file of no format docpipe knows is told which ones it takes.
        "latin1.txt": "not UTF-8 text (byte 8: invalid start byte); docpipe takes PDF, Word "
        "(DOCX), PNG, JPEG or TIFF files, or UTF-8 text",
    }


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
    assert started == ["contract.pdf", "contract.txt"]
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
        ids = sorted(
            r["document_id"]
            for r in s.conn.execute(b"SELECT document_id FROM pipeline_run").fetchall()
        )
    assert ids == ["contract.pdf", "contract.txt"]


def test_review_list_show_and_decisions_from_the_command_line(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    tmp_path: Path,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
) -> None:
    api = start_api()
    start_worker()
    fake_llm.add_fault("invented_quote", count=100, step="extract_fields")
    samples = tmp_path / "samples"
    assert docpipe("samples", str(samples), "--count", "2").returncode == 0
    submitted = docpipe("submit", *sorted(map(str, samples.iterdir())), "--watch", "--api", api)
    assert submitted.returncode == 1, submitted.stdout  # both wait for a person
    waiting = scalar(
        db,
        "SELECT array_agg(id::text ORDER BY review_since, id) FROM pipeline_run "
        "WHERE status = 'needs_review'",
    )
    assert len(waiting) == 2
    listed = docpipe("review", "list", "--reason", "rule", "--api", api)
    assert listed.returncode == 0, listed.stderr
    assert all(run_id in listed.stdout for run_id in waiting)
    shown = docpipe("review", "show", waiting[0], "--api", api)
    assert "waits at step extract_fields" in shown.stdout
    assert "(quote not in the document)" in shown.stdout
    fake_llm.reset()
    edits = tmp_path / "edits.json"
    edits.write_text('[{"path": "/fields/governing_law", "action": "correct", "value": "Ohio"}]')
    approved = docpipe(
        "review",
        "approve",
        waiting[0],
        "--edit",
        str(edits),
        "--set",
        "/fields/term_months=24",
        "--api",
        api,
    )
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "approve recorded" in approved.stdout
    rejected = docpipe("review", "reject", waiting[1], "--reason", "a test", "--api", api)
    assert rejected.returncode == 0 and "the run is failed" in rejected.stdout
    stale = docpipe(
        "review", "reject", waiting[1], "--reason", "again", "--revision", "1", "--api", api
    )
    assert stale.returncode == 4
    assert one_line_error(stale).startswith(
        f"error: it conflicts with what is stored (409): run {waiting[1]}'s review is at "
        "revision 2, not 1: anonymous decided reject at "
    )
    diff = scalar(db, "SELECT diff FROM review_decision WHERE action = 'approve'")
    assert {(d["path"], d["after"]) for d in diff} >= {
        ("/fields/governing_law", "Ohio"),
        ("/fields/term_months", 24),
    }


def test_batch_results_download_resumes_after_the_connection_drops(
    db: Database, broker: object, tmp_path: Path, start_api: Callable[..., str]
) -> None:
    """The export through a proxy that drops the first connection part-way through a line:
    the command resumes after the last run it wrote whole, and the file holds every run
    once, as one uninterrupted download would. The dropped download gave its export slot
    (one, here) and its PostgreSQL connection back."""
    api = start_api(DOCPIPE_MAX_RESULT_EXPORTS="1")
    # Sent in an order neither their names nor their run ids have.
    documents_sent = [
        {"id": f"d-{i * 7 % 300:03}", "text": f"CONTRACT {i}\nThe parties agree."}
        for i in range(300)
    ]
    batch_id = httpx.post(f"{api}/batches", json={"documents": documents_sent}).json()["batch_id"]
    for fmt, cut_after in (("jsonl", 50_000), ("csv", 10_000)):
        whole = httpx.get(f"{api}/batches/{batch_id}/results", params={"format": fmt}).content
        assert len(whole) > 2 * cut_after
        output = tmp_path / f"results.{fmt}"
        with cutting_proxy(api, cut_after=cut_after) as (proxy, connections):
            done = docpipe(
                "batch", "results", batch_id, "--format", fmt, "-o", str(output), "--api", proxy
            )
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(connections) == 2, "cut once, resumed once"
        assert f"batch {batch_id}: 300 runs written to {output}" in done.stderr
        assert output.read_bytes() == whole, f"{fmt}: every run once, in order"
        if fmt == "csv":  # what it has no column for is said, not only in a header
            assert "no column for: extract_fields.evidence (the values' evidence: " in done.stderr
    # A workbook cannot resume part-way: it starts again, and is whole.
    book = tmp_path / "results.xlsx"
    with cutting_proxy(api, cut_after=3_000) as (proxy, connections):
        done = docpipe(
            "batch",
            "results",
            batch_id,
            "--format",
            "xlsx",
            "--evidence",
            "-o",
            str(book),
            "--api",
            proxy,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(connections) == 2
    assert done.stderr == f"batch {batch_id}: 300 runs written to {book}\n"
    values = openpyxl.load_workbook(io.BytesIO(book.read_bytes()))["Values"]
    documents = [row[0] for row in values.iter_rows(min_row=3, values_only=True)]
    assert documents == [d["id"] for d in documents_sent]
    no_file = docpipe("batch", "results", batch_id, "--format", "xlsx", "--api", api)
    assert (no_file.returncode, no_file.stderr) == (2, "a workbook is a file: give -o FILE.xlsx\n")
    exporting = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'docpipe-export'"
    wait_until(lambda: scalar(db, exporting) == 0, timeout_s=10)
    filtered = docpipe("batch", "results", batch_id, "--status", "pending", "--api", api)
    assert len(filtered.stdout.splitlines()) == 300, "to standard output"
    refused = docpipe("batch", "results", batch_id, "--status", "finished", "--api", api)
    assert refused.returncode == 4, refused.stderr
    assert refused.stderr.startswith(
        "error: the API refused the request as invalid (422): status: 'finished' is neither"
    )
