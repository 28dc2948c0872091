"""The process that reads a PDF with PDFium for :mod:`docpipe.extraction.pdf_process`: it
says it is ready once its interpreter is up, then answers requests on stdin one at a time (the page
count, a page's text layer, a page rendered) until stdin closes.

Run as ``python -m docpipe.extraction.pdf_server FD MAX_BYTES``: ``FD`` is the PDF's file
descriptor, inherited from the parent; ``MAX_BYTES``, the memory it may allocate besides
what the interpreter holds when it starts (``RLIMIT_DATA``; 0: no limit). PDFium aborts the
process when an allocation fails, so a page past the limit ends the process, never a pod.

Each message is a 4-byte big-endian length and that many bytes of JSON; an answer whose
JSON names ``payload`` is followed by that many bytes (a rendered page's pixels or PNG).
"""

from __future__ import annotations

import io
import json
import re
import resource
import struct
import sys
from typing import IO, Any

import pypdfium2 as pdfium

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.failures import as_unreadable
from docpipe.extraction.limits import check_page_chars
from docpipe.extraction.pixels import fit_within
from docpipe.extraction.text_layer import read_text_layer

__all__ = ["read_message", "write_message"]

# PDFium's FPDF_GetLastError codes (fpdfview.h).
_ERR_FORMAT, _ERR_PASSWORD, _ERR_SECURITY = 3, 4, 5
# Every PDF body is "N G obj ... endobj"; a file with the magic number and none of these (in
# its first megabytes) is something else wearing a PDF header.
_OBJECT = re.compile(rb"\d+\s+\d+\s+obj\b")
_SEARCHED_BYTES = 4_000_000
_LENGTH = struct.Struct(">I")


def read_message(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next message's JSON, or None at the end of the stream."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(head)
    message = json.loads(stream.read(length))
    assert isinstance(message, dict)
    return message


def write_message(stream: IO[bytes], message: dict[str, Any], payload: bytes = b"") -> None:
    if payload:
        message = {**message, "payload": len(payload)}
    body = json.dumps(message).encode()
    stream.write(_LENGTH.pack(len(body)) + body + payload)
    stream.flush()


class _Server:
    def __init__(self, fd: int) -> None:
        self._path = f"/proc/self/fd/{fd}"
        self._pdf: pdfium.PdfDocument | None = None
        self._file: IO[bytes] | None = None

    def answer(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        op = request["op"]
        if op == "open":
            return self._open(), b""
        index = int(request["page"])
        with as_unreadable(f"page {index + 1}"):
            page = self._document()[index]
            try:
                if op == "text":
                    return self._text(page, index, int(request["max_chars"])), b""
                return self._render(page, index, request)
            finally:
                page.close()

    def _document(self) -> pdfium.PdfDocument:
        assert self._pdf is not None, "open first"
        return self._pdf

    def _open(self) -> dict[str, Any]:
        # A file object of its own (its own offset): PDFium would resolve the path, and the
        # parent's file may be one already unlinked.
        self._file = open(self._path, "rb")  # noqa: SIM115 (open while the server runs)
        try:
            self._pdf = pdfium.PdfDocument(self._file)
        except pdfium.PdfiumError as exc:
            raise _unreadable(self._path, exc) from None
        with as_unreadable("the PDF"):
            return {"pages": len(self._pdf)}

    def _text(self, page: pdfium.PdfPage, index: int, max_chars: int) -> dict[str, Any]:
        layer = read_text_layer(
            page, check_chars=lambda count: check_page_chars(index + 1, count, max_chars)
        )
        return {
            "text": layer.layout.text,
            "rotation": layer.rotation,
            "size": list(layer.size),
            "words": [[start, end, *box] for start, end, box in layer.words],
        }

    def _render(
        self, page: pdfium.PdfPage, index: int, request: dict[str, Any]
    ) -> tuple[dict[str, Any], bytes]:
        width, height = page.get_size()
        fit = fit_within(
            width,
            height,
            dpi=float(request["dpi"]),
            max_pixels=int(request["max_pixels"]),
            min_dpi=float(request["min_dpi"]),
            what=f"page {index + 1}",
            setting=str(request["setting"]),
        )
        bitmap = page.render(
            scale=fit.scale,
            rotation=int(request["rotation"]),
            grayscale=bool(request["grayscale"]),
            may_draw_forms=bool(request["forms"]),
        )
        try:
            image = bitmap.to_pil()
            if request["png"]:
                buffer = io.BytesIO()
                image.save(buffer, format="PNG")
                pixels = buffer.getvalue()
            else:
                pixels = image.tobytes()
        finally:
            bitmap.close()
        answer = {
            "width": image.width,
            "height": image.height,
            "mode": image.mode,
            "scale": fit.scale,
            "reduced": fit.reduced,
        }
        return answer, pixels


def _unreadable(path: str, exc: pdfium.PdfiumError) -> UnreadableDocumentError:
    code = getattr(exc, "err_code", None)
    if code in (_ERR_PASSWORD, _ERR_SECURITY):
        return UnreadableDocumentError(
            "the PDF is encrypted: it opens only with a password", kind="encrypted"
        )
    with open(path, "rb") as file:
        start = file.read(_SEARCHED_BYTES)
    if code == _ERR_FORMAT and not _OBJECT.search(start):
        return UnreadableDocumentError(
            "the file starts like a PDF but holds no PDF objects", kind="format_mismatch"
        )
    return UnreadableDocumentError(f"the PDF is damaged or truncated ({exc})", kind="corrupt")


def _limit_memory(max_bytes: int) -> None:
    """At most ``max_bytes`` of data more than the interpreter holds now (VmData)."""
    if max_bytes > 0:
        with open("/proc/self/status", "rb") as status:
            found = re.search(rb"VmData:\s+(\d+) kB", status.read())
        held = int(found.group(1)) * 1024 if found else 0
        resource.setrlimit(resource.RLIMIT_DATA, (held + max_bytes, held + max_bytes))


def main(argv: list[str]) -> None:
    fd, max_bytes = int(argv[1]), int(argv[2])
    _limit_memory(max_bytes)
    server = _Server(fd)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    write_message(answers, {"ready": True})  # the interpreter is up: the requests' time starts
    while (request := read_message(requests)) is not None:
        try:
            answer, payload = server.answer(request)
        except UnreadableDocumentError as exc:
            answer, payload = {"kind": exc.kind, "message": exc.args[0]}, b""
        except MemoryError:
            answer, payload = {"kind": "out_of_memory", "message": ""}, b""
        write_message(answers, answer, payload)


if __name__ == "__main__":
    main(sys.argv)
