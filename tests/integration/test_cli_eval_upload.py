"""``docpipe eval set upload`` with files: the JSON lines name PDFs of this machine by path
(relative to the JSON-lines file's folder), and the command sends them with the lines as
one multipart upload, which the API stores as PUT /documents/{id} stores a file. A path that
is not a file is one line naming the JSON line, and nothing is sent. The command as a
subprocess against a real API process on real PostgreSQL; the PDF made by the generators."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docpipe.state.db import Database
from docpipe_dev.sample_files import contract_pdf
from docpipe_dev.samples import sample_contracts
from tests.integration.test_cli import docpipe, one_line_error
from tests.support.factories import scalar

CONTRACT = sample_contracts(1)[0]
EXPECTED = {"fields": dict(CONTRACT.expected)}


def write_lines(path: Path, *documents: dict[str, Any]) -> Path:
    path.write_text(
        "".join(json.dumps({"document": d, "expected": EXPECTED}) + "\n" for d in documents)
    )
    return path


def test_a_set_uploaded_with_local_pdfs_stores_them_and_a_missing_one_sends_nothing(
    db: Database, broker: object, tmp_path: Path, start_api: Callable[..., str]
) -> None:
    api = start_api()
    pdf = contract_pdf(CONTRACT.text)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "contract.pdf").write_bytes(pdf)
    made = docpipe("eval", "set", "create", "contracts", "--api", api)
    assert made.returncode == 0, made.stderr

    items = write_lines(
        tmp_path / "set.jsonl",
        {"id": "c-pdf", "path": "files/contract.pdf"},
        {"id": "c-text", "text": CONTRACT.text},
    )
    uploaded = docpipe("eval", "set", "upload", "contracts", str(items), "--api", api)
    assert uploaded.returncode == 0, uploaded.stderr
    assert "set contracts (document_extract step extract_fields): version 1, 2 items" in (
        uploaded.stdout
    )
    stored = "SELECT format || ' ' || size_bytes FROM document WHERE id = %s"
    assert scalar(db, stored, "c-pdf") == f"pdf {len(pdf)}"
    assert scalar(db, stored, "c-text") == f"text {len(CONTRACT.text.encode())}"

    # A line naming a file that is not there: one line naming it; the good line before it
    # is not sent either.
    missing = write_lines(
        tmp_path / "more.jsonl",
        {"id": "c-pdf-2", "path": str(tmp_path / "files" / "contract.pdf")},
        {"id": "c-gone", "path": "gone.pdf"},
    )
    refused = docpipe("eval", "set", "upload", "contracts", str(missing), "--api", api)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert one_line_error(refused) == (
        f"error: {missing}:2: document.path 'gone.pdf' is not a file ({tmp_path / 'gone.pdf'})"
    )
    assert scalar(db, "SELECT count(*) FROM document") == 2
    assert scalar(db, "SELECT version FROM evaluation_set") == 1
