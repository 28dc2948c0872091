"""Tesseract, the Debian package's binary (``tesseract-ocr`` + ``tesseract-ocr-eng``), run as
a subprocess per page: bounded in time, one thread, nothing downloaded. Its TSV output
gives the words with their confidences; the text is rebuilt from it line by line."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["OcrError", "OcrText", "OcrTimeout", "read_image"]

# One thread per page: a worker process is one unit of concurrency, and Tesseract's OpenMP
# threads would compete with the other worker processes for the same cores.
_ENV = {"OMP_THREAD_LIMIT": "1"}
_WORD_LEVEL = "5"


class OcrError(RuntimeError):
    """Tesseract is missing or failed (a deployment problem, not the document's)."""


class OcrTimeout(Exception):
    """Tesseract did not finish the page within its time limit (it was killed)."""


@dataclass(frozen=True)
class OcrText:
    text: str
    confidence: float | None  # mean word confidence, 0-100; None when no word was found


def read_image(png: bytes, *, language: str, dpi: int, timeout_s: float) -> OcrText:
    """The text Tesseract reads on one page image (PNG bytes), within ``timeout_s``."""
    binary = shutil.which("tesseract")
    if binary is None:
        raise OcrError("the tesseract binary is not installed (Debian: tesseract-ocr)")
    argv = [binary, "stdin", "stdout", "-l", language, "--dpi", str(dpi), "--psm", "3", "tsv"]
    try:
        done = subprocess.run(
            argv,
            input=png,
            capture_output=True,
            timeout=timeout_s,
            env={**os.environ, **_ENV},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise OcrTimeout(f"OCR took longer than {timeout_s:g} s") from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()[-500:]
        raise OcrError(f"tesseract failed (exit {done.returncode}): {detail}")
    return _text_of(done.stdout.decode("utf-8", "replace"))


def _text_of(tsv: str) -> OcrText:
    lines: dict[tuple[str, str, str], list[str]] = {}
    confidences: list[float] = []
    for row in csv.DictReader(io.StringIO(tsv), delimiter="\t", quoting=csv.QUOTE_NONE):
        word = (row.get("text") or "").strip()
        if row.get("level") != _WORD_LEVEL or not word:
            continue
        lines.setdefault((row["block_num"], row["par_num"], row["line_num"]), []).append(word)
        if (confidence := float(row["conf"])) >= 0:
            confidences.append(confidence)
    paragraphs: dict[tuple[str, str], list[str]] = {}
    for (block, paragraph, _), words in lines.items():
        paragraphs.setdefault((block, paragraph), []).append(" ".join(words))
    # Paragraphs apart by a blank line, as a typed contract has them.
    text = "\n\n".join("\n".join(p) for p in paragraphs.values())
    mean = round(sum(confidences) / len(confidences), 1) if confidences else None
    return OcrText(text, mean)
