"""Files to documents, one at a time, going on past the ones that are refused.

A PDF, Word file or image (PNG, JPEG, TIFF) is uploaded as it is (the API reads its format
from its bytes), any other file as UTF-8 text; each under its name as it was sent
("contract.pdf", "contract.txt"), so the same contract as text, PDF and DOCX makes three
documents, and the lists, the pages and the exports show the name the file had. A file the
API refuses (413 past its format's limit, 415, 422, 409 for other bytes under a stored id)
or that cannot be read here is named with the reason, on stderr, and the others go on.
Anything else (the API unreachable, a key refused) stops the command: it is no file's fault.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from docpipe.cli.client import ApiError, DocpipeClient
from docpipe.cli.common import errors

__all__ = [
    "FILE_SUFFIXES",
    "Refusal",
    "Uploads",
    "attempt",
    "document_id_of",
    "print_summary",
    "upload_files",
]

T = TypeVar("T")

FILE_SUFFIXES = (".pdf", ".docx", ".png", ".jpg", ".jpeg", ".tif", ".tiff")
# What the API answers about a file itself; other errors are not one file's.
_FILE_REFUSALS = frozenset({400, 409, 413, 415, 422})


@dataclass(frozen=True)
class Refusal:
    path: Path
    reason: str


@dataclass
class Uploads:
    stored: list[tuple[Path, str]] = field(default_factory=list)  # (file, document id)
    refused: list[Refusal] = field(default_factory=list)


def document_id_of(path: Path) -> str:
    """The document id a file is stored under: its name."""
    return path.name


def upload_files(client: DocpipeClient, files: Sequence[Path]) -> Uploads:
    """Each file stored as a document (storing the same bytes again is a no-op)."""
    uploads = Uploads()
    for path in files:
        doc_id = document_id_of(path)
        if attempt(uploads, path, partial(_store, client, path, doc_id)) is not None:
            uploads.stored.append((path, doc_id))
    return uploads


def _store(client: DocpipeClient, path: Path, doc_id: str) -> dict[str, Any]:
    if path.suffix.lower() in FILE_SUFFIXES:
        return client.put_file(doc_id, path.read_bytes())
    return client.put_document(doc_id, path.read_text(encoding="utf-8"))


def attempt(uploads: Uploads, path: Path, call: Callable[[], T]) -> T | None:
    """``call``'s result, or None with the file's refusal noted and printed."""
    try:
        return call()
    except ApiError as exc:
        if exc.status not in _FILE_REFUSALS:
            raise
        reason = str(exc)
    except UnicodeDecodeError as exc:
        from docpipe.extraction.formats import ACCEPTED_FORMATS

        reason = (
            f"not UTF-8 text (byte {exc.start}: {exc.reason}); docpipe takes {ACCEPTED_FORMATS}"
        )
    except OSError as exc:
        reason = f"cannot be read ({exc.strerror or exc})"
    uploads.refused.append(Refusal(path, reason))
    errors.print(f"[red]refused[/red] {path}: {reason}", markup=True, highlight=False)
    return None


def print_summary(files: int, submitted: int, refused: Sequence[Refusal]) -> None:
    """One line for the whole command, then each refused file again (a long run's first
    refusals have scrolled away by then)."""
    errors.print(f"{submitted} of {files} files submitted, {len(refused)} refused", highlight=False)
    for refusal in refused:
        errors.print(f"  {refusal.path}: {refusal.reason}", highlight=False, markup=False)
