"""Tesseract, the Debian package's binary (``tesseract-ocr`` + ``tesseract-ocr-eng``, and
``tesseract-ocr-osd`` for orientation), run as a subprocess per call: bounded in time, one
thread, nothing downloaded. Its TSV output gives the words with their confidences and
boxes; the text is rebuilt from it line by line.

:func:`read_upright` reads a page however it was scanned: a page read as it lies with good
confidence is taken as it is (orientation detection costs nothing there); a poor read asks
Tesseract's orientation detection, on a downscaled copy, which way is up, and reads the
page again turned that way when it says so, keeping whichever read is better. A page read
well but with its words standing taller than wide (Tesseract reads lines running down a
sideways page) is asked too, and only its word boxes are turned.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, replace

from PIL import Image

from docpipe.extraction.geometry import turn_box

__all__ = [
    "OcrError",
    "OcrText",
    "OcrTimeout",
    "OcrWord",
    "Orientation",
    "UprightText",
    "detect_orientation",
    "read_image",
    "read_upright",
]

log = logging.getLogger(__name__)

# One thread per page: a worker process is one unit of concurrency, and Tesseract's OpenMP
# threads would compete with the other worker processes for the same cores.
_ENV = {"OMP_THREAD_LIMIT": "1"}
_WORD_LEVEL = "5"
# Orientation detection reads a copy of the page at about this resolution: it needs the
# shapes of letters, not their details, and costs a third of what it does at 300 dpi.
_OSD_DPI = 150
_ROTATE = re.compile(r"^Rotate:\s*(\d+)\s*$", re.MULTILINE)
_ORIENTATION_CONFIDENCE = re.compile(r"^Orientation confidence:\s*([\d.]+)\s*$", re.MULTILINE)
# A page whose words of at least this many characters mostly stand taller than wide (and
# there are enough of them) has its lines running down the page: it lies on its side.
_VERTICAL_WORD_CHARS = 3
_VERTICAL_MIN_WORDS = 5
# What Tesseract says when a page has too little text to tell its orientation.
_TOO_FEW_CHARACTERS = "Too few characters"


class OcrError(RuntimeError):
    """Tesseract is missing or failed. Its message is for tenants too: what Tesseract
    printed goes to the worker's log, never into it."""


class OcrTimeout(Exception):
    """Tesseract did not finish the page within its time limit (it was killed)."""


@dataclass(frozen=True)
class OcrWord:
    """A word Tesseract read: where it is in the page's text, and its box in pixels."""

    start: int
    end: int
    left: int
    top: int
    right: int
    bottom: int
    confidence: float


@dataclass(frozen=True)
class OcrText:
    text: str
    confidence: float | None  # mean word confidence, 0-100; None when no word was found
    words: tuple[OcrWord, ...] = ()

    def confident_chars(self, threshold: float) -> int:
        """Characters of the words read with at least ``threshold`` confidence: how much of
        the page was really read (a sideways read has many words, few of them confident)."""
        return sum(w.end - w.start for w in self.words if w.confidence >= threshold)


@dataclass(frozen=True)
class Orientation:
    rotate: int  # degrees clockwise that turn the image upright: 0, 90, 180 or 270
    confidence: float  # Tesseract's orientation confidence (higher is surer)


@dataclass(frozen=True)
class UprightText:
    """A page as read upright: the read, the degrees clockwise the image was turned for it,
    the image's size as read (pixels), and whether its orientation stayed undecided."""

    read: OcrText
    rotation: int
    size: tuple[int, int]
    undecided: bool = False


def read_upright(
    image: Image.Image, *, language: str, dpi: int, timeout_s: float, low_confidence: float
) -> UprightText:
    """The page's text read the right way up, all within ``timeout_s`` (OcrTimeout when not
    even the first read finished), with its words' boxes as on the upright page.
    ``undecided`` when the read is poor and the orientation could not be told (the page is
    then read as it lies)."""
    deadline = time.monotonic() + timeout_s
    first = read_image(_png(image), language=language, dpi=dpi, timeout_s=timeout_s)
    poor = first.confidence is not None and first.confidence < low_confidence
    if not poor and not _vertical(first):
        return UprightText(first, 0, image.size)  # upright, or nothing to orient by
    try:
        factor = max(1, round(dpi / _OSD_DPI))
        small = image.reduce(factor) if factor > 1 else image
        orientation = detect_orientation(_png(small), dpi=dpi // factor, timeout_s=_left(deadline))
        if orientation is None or orientation.rotate == 0:
            return UprightText(first, 0, image.size, undecided=poor and orientation is None)
        if not poor:
            # Tesseract read the sideways lines well as they lie: the text stands, only its
            # boxes are turned to where they are on the upright page.
            degrees = orientation.rotate
            return UprightText(
                _turned(first, image.size, degrees), degrees, _turned_size(image.size, degrees)
            )
        turned = image.rotate(-orientation.rotate, expand=True)  # PIL turns counter-clockwise
        second = read_image(_png(turned), language=language, dpi=dpi, timeout_s=_left(deadline))
    except OcrTimeout:
        return UprightText(first, 0, image.size, undecided=poor)
    if second.confident_chars(low_confidence) > first.confident_chars(low_confidence):
        return UprightText(second, orientation.rotate, turned.size)
    # Tesseract named a way up, but the page reads no better turned: it stays as it was.
    return UprightText(first, 0, image.size, undecided=True)


def _vertical(read: OcrText) -> bool:
    """Whether most words of some length stand taller than wide: lines that run down the
    page, which Tesseract may read well enough while the page lies on its side."""
    long = [w for w in read.words if w.end - w.start >= _VERTICAL_WORD_CHARS]
    tall = sum(1 for w in long if w.bottom - w.top > w.right - w.left)
    return len(long) >= _VERTICAL_MIN_WORDS and tall * 2 > len(long)


def _turned(read: OcrText, size: tuple[int, int], degrees: int) -> OcrText:
    words = []
    for w in read.words:
        left, top, right, bottom = turn_box((w.left, w.top, w.right, w.bottom), size, degrees)
        words.append(replace(w, left=int(left), top=int(top), right=int(right), bottom=int(bottom)))
    return replace(read, words=tuple(words))


def _turned_size(size: tuple[int, int], degrees: int) -> tuple[int, int]:
    return (size[1], size[0]) if degrees in (90, 270) else size


def read_image(png: bytes, *, language: str, dpi: int, timeout_s: float) -> OcrText:
    """The text Tesseract reads on one page image (PNG bytes), within ``timeout_s``."""
    done = _tesseract(png, ["-l", language, "--dpi", str(dpi), "--psm", "3", "tsv"], timeout_s)
    if done.returncode != 0:
        raise _failed("tesseract", done, "")
    return _text_of(done.stdout.decode("utf-8", "replace"))


def detect_orientation(png: bytes, *, dpi: int, timeout_s: float) -> Orientation | None:
    """Which way is up on a page image, by Tesseract's orientation detection (``--psm 0``,
    the osd data); None when the page has too little text to tell."""
    done = _tesseract(png, ["--dpi", str(dpi), "--psm", "0"], timeout_s)
    out = done.stdout.decode("utf-8", "replace")
    rotate, confidence = _ROTATE.search(out), _ORIENTATION_CONFIDENCE.search(out)
    if done.returncode == 0 and rotate and confidence:
        return Orientation(int(rotate.group(1)) % 360, float(confidence.group(1)))
    if _TOO_FEW_CHARACTERS in out + _stderr(done):
        return None
    raise _failed("tesseract orientation detection", done, out)


def _tesseract(
    png: bytes, options: list[str], timeout_s: float
) -> subprocess.CompletedProcess[bytes]:
    binary = shutil.which("tesseract")
    if binary is None:
        raise OcrError("the tesseract binary is not installed (Debian: tesseract-ocr)")
    try:
        return subprocess.run(
            [binary, "stdin", "stdout", *options],
            input=png,
            capture_output=True,
            timeout=timeout_s,
            env={**os.environ, **_ENV},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise OcrTimeout(f"OCR took longer than {timeout_s:g} s") from None


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise OcrTimeout("no time left for this page")
    return left


def _stderr(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stderr.decode("utf-8", "replace").strip()[-500:]


def _failed(what: str, done: subprocess.CompletedProcess[bytes], out: str) -> OcrError:
    """The failure, its output logged for operators and left out of the error."""
    log.warning("%s failed (exit %d): %s", what, done.returncode, _stderr(done) or out[-500:])
    return OcrError(f"{what} failed (exit {done.returncode}); its output is in the worker's log")


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def _text_of(tsv: str) -> OcrText:
    """The words of Tesseract's TSV as text: words of a line apart by a space, lines by a
    newline, paragraphs by a blank line (as a typed contract has them), with each word's
    place in that text."""
    paragraphs: dict[tuple[str, str], dict[str, list[dict[str, str]]]] = {}
    for row in csv.DictReader(io.StringIO(tsv), delimiter="\t", quoting=csv.QUOTE_NONE):
        if row.get("level") != _WORD_LEVEL or not (row.get("text") or "").strip():
            continue
        lines = paragraphs.setdefault((row["block_num"], row["par_num"]), {})
        lines.setdefault(row["line_num"], []).append(row)
    parts: list[str] = []
    words: list[OcrWord] = []
    offset = 0
    for p, lines in enumerate(paragraphs.values()):
        for n, rows in enumerate(lines.values()):
            separator = "" if p == n == 0 else "\n" if n else "\n\n"
            for i, row in enumerate(rows):
                text = row["text"].strip()
                gap = separator if i == 0 else " "
                parts.append(gap + text)
                offset += len(gap)
                left, top = int(row["left"]), int(row["top"])
                words.append(
                    OcrWord(
                        offset,
                        offset + len(text),
                        left,
                        top,
                        left + int(row["width"]),
                        top + int(row["height"]),
                        float(row["conf"]),
                    )
                )
                offset += len(text)
    confidences = [w.confidence for w in words if w.confidence >= 0]
    mean = round(sum(confidences) / len(confidences), 1) if confidences else None
    return OcrText("".join(parts), mean, tuple(words))
