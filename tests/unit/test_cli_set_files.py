"""The lines ``docpipe eval set upload`` sends: a line naming a local file by path names a
file part instead, every other line (not JSON, no path, a document id) goes as it was, and
a path that is no file's stops it, naming the line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from docpipe.cli.failures import UsageError
from docpipe.cli.set_files import lines_with_files


def test_a_path_becomes_a_part_named_after_its_line_and_other_lines_go_as_they_are(
    tmp_path: Path,
) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.pdf").write_bytes(b"%PDF-1.4")
    kept = [b'{"document": "known", "expected": {}}\n', b"not json\n", b"\n"]
    named = {"document": {"id": "a", "path": "files/a.pdf"}, "expected": {"x": 1}}
    (tmp_path / "set.jsonl").write_bytes(b"".join(kept) + json.dumps(named).encode() + b"\n")
    sent = io.BytesIO()
    files = lines_with_files(tmp_path / "set.jsonl", sent)
    assert files == {"line-4": tmp_path / "files" / "a.pdf"}
    *passed, rewritten = sent.read().splitlines(keepends=True)
    assert passed == kept
    assert json.loads(rewritten) == {
        "document": {"id": "a", "file": "line-4"},
        "expected": {"x": 1},
    }


def test_no_path_names_no_file(tmp_path: Path) -> None:
    (tmp_path / "set.jsonl").write_text('{"document": {"id": "a", "text": "t"}, "expected": {}}\n')
    assert lines_with_files(tmp_path / "set.jsonl", io.BytesIO()) == {}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("gone.pdf", "set.jsonl:1: document.path 'gone.pdf' is not a file"),
        (".", "set.jsonl:1: document.path '.' is not a file"),
        (7, "set.jsonl:1: document.path must be a file's path"),
        ("", "set.jsonl:1: document.path must be a file's path"),
    ],
)
def test_a_path_that_is_no_file_is_refused_naming_its_line(
    tmp_path: Path, path: object, message: str
) -> None:
    line = {"document": {"id": "a", "path": path}, "expected": {}}
    (tmp_path / "set.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(UsageError) as refused:
        lines_with_files(tmp_path / "set.jsonl", io.BytesIO())
    assert message in str(refused.value)
