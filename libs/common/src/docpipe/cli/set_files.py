"""An evaluation set's JSON lines with the local files they name, sent as one upload.

A line may name a file of this machine: ``{"document": {"id": "x", "path": "contract.pdf"},
"expected": {...}}``, a relative path read from the JSON-lines file's folder. Such a line is
sent naming a multipart file part instead (``"file": "line-3"``, after its line number) and
the file as that part, read as the upload goes out; every other line goes as it is (the API
judges it and names its line). A path that is not a file stops the command before anything
is sent, naming the line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from docpipe.cli.failures import UsageError

__all__ = ["lines_with_files"]


def lines_with_files(jsonl: Path, sent: IO[bytes]) -> dict[str, Path]:
    """Write the lines of ``jsonl`` as they are to be sent into ``sent`` (rewound) and return
    the files they name, by part name; empty when no line names a path."""
    files: dict[str, Path] = {}
    with jsonl.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            sent.write(_line_sent(line, f"{jsonl}:{number}", jsonl.parent, files))
    sent.seek(0)
    return files


def _line_sent(line: bytes, where: str, folder: Path, files: dict[str, Path]) -> bytes:
    try:
        item = json.loads(line)
    except ValueError:
        return line  # not JSON: the API refuses it, naming the line
    document = item.get("document") if isinstance(item, dict) else None
    if not isinstance(document, dict) or "path" not in document:
        return line
    path = document.pop("path")
    if not isinstance(path, str) or not path:
        raise UsageError(f"{where}: document.path must be a file's path, relative to the file")
    file = folder / path
    if not file.is_file():
        raise UsageError(f"{where}: document.path {path!r} is not a file ({file})")
    part = f"line-{where.rsplit(':', 1)[1]}"
    files[part] = file
    document["file"] = part
    return json.dumps(item).encode() + b"\n"
