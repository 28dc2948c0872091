"""``docpipe runs list``, ``docpipe batch list`` and ``docpipe dashboard`` as subprocesses
against a real API: past work found by document name, status or batch, a page at a time,
and the tenant's work at a glance."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from docpipe.state.db import Database
from tests.integration.test_cli import docpipe


def test_runs_and_batches_are_found_from_the_command_line(
    db: Database, tmp_path: Path, start_api: Callable[..., str]
) -> None:
    api = start_api()  # no workers: every run stays queued
    samples = tmp_path / "samples"
    assert docpipe("samples", str(samples), "--count", "3").returncode == 0
    files = sorted(samples.iterdir())
    submitted = docpipe("submit", *map(str, files), "--api", api)
    assert submitted.returncode == 0, submitted.stderr
    batch = docpipe("batch", "submit", str(files[0]), "--api", api)
    assert batch.returncode == 0, batch.stderr
    batch_id = batch.stdout.split()[1].rstrip(":")

    listed = docpipe("runs", "list", "--api", api)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("queued (extract_sections)") == 4
    # Newest first: the batch's run, then the files in the order they were submitted, last
    # first; each document under the name its file had.
    names = [f.name for f in files]
    page = json.loads(docpipe("runs", "list", "--json", "--api", api).stdout)
    assert [r["document_id"] for r in page["runs"]] == [names[0], *names[::-1]]

    first = docpipe("runs", "list", "--limit", "2", "--api", api)
    assert "2 runs shown; the next page: docpipe runs list --limit 2 --cursor " in first.stdout
    follow = first.stdout.split("the next page: docpipe ")[1].split()
    rest = docpipe(*follow, "--api", api)
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.count("queued (extract_sections)") == 2

    prefix = names[1][:5]
    found = json.loads(docpipe("runs", "list", "--document", prefix, "--json", "--api", api).stdout)
    assert [r["document_id"] for r in found["runs"]] == [names[1]]
    in_batch = docpipe("runs", "list", "--batch", batch_id, "--since", "1h", "--api", api)
    assert in_batch.stdout.count("document_extract:v1") == 1 and names[0] in in_batch.stdout
    none = docpipe("runs", "list", "--status", "failed", "--api", api)
    assert none.returncode == 0 and "no runs with these filters" in none.stdout

    batches = docpipe("batch", "list", "--api", api)
    assert batches.returncode == 0, batches.stderr
    [row] = [line for line in batches.stdout.splitlines() if batch_id in line]
    assert "running" in row and "0/1" in row and "$0.0000" in row
    bad = docpipe("runs", "list", "--since", "yesterday", "--api", api)
    assert bad.returncode == 2 and "neither a time" in bad.stderr

    # At a glance: the figures in lines, then the newest batches and runs.
    glance = docpipe("dashboard", "--api", api)
    assert glance.returncode == 0, glance.stderr
    lines = glance.stdout.splitlines()
    assert lines[:2] == ["going on: 4 queued, 0 running", "waiting for a person: 0 runs"]
    assert lines[2].startswith("ended since ") and lines[2].endswith(
        " UTC: 0 done, 0 failed, 0 cancelled, 0 expired, 0 budget exceeded"
    )
    [batch_row] = [line for line in lines if line.startswith(batch_id)]
    assert "running" in batch_row and "0/1" in batch_row
    assert sum(name in glance.stdout for name in names) == 3
    everything = json.loads(docpipe("dashboard", "--json", "--api", api).stdout)
    assert everything["runs_by_status"]["queued"] == 4
    assert [b["batch_id"] for b in everything["batches"]] == [batch_id]
