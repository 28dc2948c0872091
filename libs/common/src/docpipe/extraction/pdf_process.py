"""A PDF read by PDFium in a process of its own (:mod:`docpipe.extraction.pdf_server`), so
that what a crafted page costs ends with that process, never with a worker or the API:

- every request has a time limit: past it the process is killed and the page fails
  ``too_slow`` (PDFium's C code cannot be interrupted from Python, so only a process of
  its own can be stopped mid-page); a caller with a deadline of its own (the step's time)
  gives it too, and a request ends by whichever comes first;
- the process has a memory limit: past it PDFium aborts it, and the page fails
  ``too_complex``; what it held is gone with it;
- a crash of PDFium on bytes it did not expect is ``corrupt``.

The caller's memory holds the answers only: a page's text and word boxes, a rendered
page's pixels (within the pixel bound, :mod:`docpipe.extraction.pixels`). A process killed
for one page is started again for the next request.
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any, BinaryIO

from PIL import Image

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.geometry import Box
from docpipe.extraction.limits import too_slow

__all__ = ["LayerRead", "PdfProcess", "RenderedImage"]

_LENGTH = struct.Struct(">I")
_CHUNK = 1 << 20
# Starting the reader (an interpreter, PDFium's bindings) is the machine's cost, not the
# document's: on a busy machine it can take seconds, and a page's time limit spent on it would
# be remembered as the document's too_slow. It has a bound of its own, far above a start's.
_START_S = 30.0


@dataclass(frozen=True)
class LayerRead:
    """A page's text layer in reading order (docpipe.extraction.text_layer.TextLayer)."""

    text: str
    rotation: int
    size: tuple[float, float]
    words: tuple[tuple[int, int, Box], ...]


@dataclass(frozen=True)
class RenderedImage:
    """A rendered page: raw pixels of ``mode`` (or PNG bytes, when asked), at ``scale``
    pixels per point, ``reduced`` below the resolution asked to fit the pixel bound."""

    data: bytes
    width: int
    height: int
    mode: str
    scale: float
    reduced: bool

    def image(self) -> Image.Image:
        return Image.frombytes(self.mode, (self.width, self.height), self.data)


class PdfProcess:
    """A PDF opened in a process of its own; ``file``: the PDF's bytes or its file (a real
    one is shared with the process by its descriptor; bytes or an in-memory file are
    written to a temporary file first). ``timeout_s``: each request's time limit;
    ``max_bytes``: the memory the process may take besides the interpreter's (0: no limit).
    UnreadableDocumentError for a file or page that cannot be read. ``until``
    (time.monotonic()), here and for each request: when the caller's own time ends, the
    request's too (too_slow)."""

    def __init__(
        self,
        source: bytes | BinaryIO,
        *,
        timeout_s: float,
        max_bytes: int,
        until: float | None = None,
    ) -> None:
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._spool: IO[bytes] | None = None
        self._fd = self._descriptor(source)
        self._child: subprocess.Popen[bytes] | None = None
        try:
            opened, _ = self._ask({"op": "open"}, "open the PDF", until)
            self.page_count = int(opened["pages"])
        except BaseException:
            self.close()
            raise

    def text_layer(self, index: int, *, max_chars: int, until: float | None = None) -> LayerRead:
        """Page ``index``'s text layer; too_much_text past ``max_chars`` (refused before
        PDFium reads the characters out)."""
        answer, _ = self._ask(
            {"op": "text", "page": index, "max_chars": max_chars},
            f"read page {index + 1}",
            until,
        )
        words = tuple((int(w[0]), int(w[1]), (w[2], w[3], w[4], w[5])) for w in answer["words"])
        width, height = answer["size"]
        return LayerRead(answer["text"], int(answer["rotation"]), (width, height), words)

    def render(
        self,
        index: int,
        *,
        dpi: float,
        max_pixels: int,
        min_dpi: float,
        setting: str,
        rotation: int = 0,
        grayscale: bool = False,
        png: bool = False,
        forms: bool = True,
        until: float | None = None,
    ) -> RenderedImage:
        """Page ``index`` drawn as docpipe.extraction.pixels.fit_within allows (page_too_large
        below ``min_dpi``), turned ``rotation`` degrees clockwise more than the PDF shows it;
        PNG bytes when ``png``, else raw pixels."""
        request = {
            "op": "render",
            "page": index,
            "dpi": dpi,
            "max_pixels": max_pixels,
            "min_dpi": min_dpi,
            "setting": setting,
            "rotation": rotation,
            "grayscale": grayscale,
            "png": png,
            "forms": forms,
        }
        answer, data = self._ask(request, f"render page {index + 1}", until)
        return RenderedImage(
            data,
            int(answer["width"]),
            int(answer["height"]),
            str(answer["mode"]),
            float(answer["scale"]),
            bool(answer["reduced"]),
        )

    def close(self) -> None:
        self._stop()
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    def _descriptor(self, source: bytes | BinaryIO) -> int:
        if not isinstance(source, bytes):
            try:
                return source.fileno()
            except (AttributeError, OSError, ValueError):
                source.seek(0)
                source = source.read()
        # Open until close(): the process reads it by its descriptor.
        self._spool = tempfile.TemporaryFile(prefix="docpipe-pdf-")  # noqa: SIM115
        self._spool.write(source)
        self._spool.flush()
        return self._spool.fileno()

    def _start(self) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "docpipe.extraction.pdf_server",
                str(self._fd),
                str(self._max_bytes),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(self._fd,),
        )
        self._child = child
        return child

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()

    def _ask(
        self, request: dict[str, Any], what: str, until: float | None
    ) -> tuple[dict[str, Any], bytes]:
        """The process' answer to ``request`` within the time limit and ``until`` (a
        process killed before is started again and opens the file first)."""
        if until is not None and until <= time.monotonic():
            raise _out_of_time(what)
        child, fresh = self._child, self._child is None
        if child is None:
            child = self._started(until)
        deadline, callers = time.monotonic() + self._timeout_s, False
        if until is not None and until < deadline:
            deadline, callers = until, True
        if fresh and request["op"] != "open":
            self._exchange(child, {"op": "open"}, what, deadline, callers)
        return self._exchange(child, request, what, deadline, callers)

    def _started(self, until: float | None) -> subprocess.Popen[bytes]:
        """A new process, once it says it is ready (within _START_S and ``until``)."""
        child = self._start()
        assert child.stdout is not None
        bound = time.monotonic() + _START_S
        reader = _Reader(child.stdout.fileno(), bound if until is None else min(until, bound))
        try:
            (length,) = _LENGTH.unpack(reader.read(_LENGTH.size))
            reader.read(length)
        except TimeoutError:
            self._stop()
            if until is not None and until < bound:
                raise _out_of_time("start the PDF reader") from None
            raise RuntimeError(f"the PDF reader did not start within {_START_S:g} s") from None
        except EOFError:
            self._stop()
            code = child.returncode
            raise RuntimeError(f"the PDF reader exited as it started (exit {code})") from None
        return child

    def _exchange(
        self,
        child: subprocess.Popen[bytes],
        request: dict[str, Any],
        what: str,
        deadline: float,
        callers: bool,
    ) -> tuple[dict[str, Any], bytes]:
        """``callers``: the deadline is the caller's (``until``), not the request's own
        limit."""
        assert child.stdin is not None and child.stdout is not None
        body = json.dumps(request).encode()
        try:
            child.stdin.write(_LENGTH.pack(len(body)) + body)
            child.stdin.flush()
            reader = _Reader(child.stdout.fileno(), deadline)
            (length,) = _LENGTH.unpack(reader.read(_LENGTH.size))
            answer = json.loads(reader.read(length))
            data = reader.read(int(answer.get("payload", 0)))
        except TimeoutError:
            self._stop()
            if callers:
                raise _out_of_time(what) from None
            raise too_slow(
                f"could not {what} within {self._timeout_s:g} s (DOCPIPE_PDF_PAGE_TIMEOUT_S)"
            ) from None
        except (EOFError, BrokenPipeError):
            self._stop()
            raise self._died(child, what) from None
        if "kind" in answer:
            if answer["kind"] == "out_of_memory":
                self._stop()
                raise self._out_of_memory(what)
            raise UnreadableDocumentError(answer["message"], kind=answer["kind"])
        return answer, data

    def _died(self, child: subprocess.Popen[bytes], what: str) -> UnreadableDocumentError:
        code = child.returncode
        if code == -signal.SIGABRT:  # PDFium aborts when an allocation fails
            return self._out_of_memory(what)
        return UnreadableDocumentError(
            f"could not {what}: the PDF reader stopped on it (exit {code})", kind="corrupt"
        )

    def _out_of_memory(self, what: str) -> UnreadableDocumentError:
        return UnreadableDocumentError(
            f"could not {what} within {self._max_bytes} bytes of memory "
            "(DOCPIPE_PDF_MAX_MEMORY_BYTES)",
            kind="too_complex",
        )


def _out_of_time(what: str) -> UnreadableDocumentError:
    return too_slow(f"could not {what} within the time its step had left")


class _Reader:
    """Reads from a pipe until a deadline (TimeoutError past it, EOFError at its end)."""

    def __init__(self, fd: int, deadline: float) -> None:
        self._fd = fd
        self._deadline = deadline

    def read(self, size: int) -> bytes:
        chunks, left = [], size
        while left > 0:
            wait = self._deadline - time.monotonic()
            if wait <= 0 or not select.select([self._fd], [], [], wait)[0]:
                raise TimeoutError
            chunk = os.read(self._fd, min(left, _CHUNK))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
