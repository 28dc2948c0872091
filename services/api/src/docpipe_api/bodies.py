"""What a request's body may be, read within its bounds: JSON (``require_json``,
``read_capped``, ``parsed_json``), a document (text, PDF or DOCX, spooled to disk as it
arrives) and an extraction's options. Each refusal names its limit: 413 past a size, 415
for a body of another type, 422 for one that does not parse."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import IO, Annotated, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, HTTPException, Request
from pydantic import BaseModel, ValidationError

from docpipe import json_codec
from docpipe.errors import InvalidRequestError, UnreadableDocumentError
from docpipe.extraction import DocumentFormat, check_upload, format_of_head, sniff_format
from docpipe.extraction.formats import ACCEPTED_FORMATS, IMAGE_FORMATS
from docpipe.extraction.images import PixelBounds
from docpipe.extraction.zipguard import ZipBounds
from docpipe.settings import Settings
from docpipe_api.deps import ResourcesDep
from docpipe_api.errors import describe_validation_errors
from docpipe_api.resources import Resources
from docpipe_api.schemas import DocumentTextIn, ExtractIn

__all__ = [
    "MAX_OPTIONS_BYTES",
    "DocumentUploadDep",
    "ExtractRequestDep",
    "Refusal",
    "Upload",
    "capped_stream",
    "judged_file",
    "parsed_json",
    "parsed_json_in_turn",
    "read_capped",
    "require_json",
    "spool_capped",
]

# Options are a few hundred bytes; anything near this is not an extraction request.
MAX_OPTIONS_BYTES = 64 * 1024

_Model = TypeVar("_Model", bound=BaseModel)


def parsed_json(model: type[_Model], body: bytes | bytearray) -> _Model:
    """``body`` as ``model``; 422 naming every field that does not parse (``body.<field>``),
    or a NUL character in any of its strings."""
    try:
        parsed = model.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_errors(exc.errors(), prefix="body")) from None
    if json_codec.holds_nul(body):
        raise InvalidRequestError(f"body: {json_codec.NUL_REFUSED}")
    return parsed


# pydantic-core holds the GIL for a whole parse: 18-27 ms for a 1 MB review decision, 40-90
# ms for a 32 MB batch. Parses in several threads at once take the GIL in turn, and the
# event loop waits behind each (four 1 MB decisions at once: 83 ms on the API's port).
_PARSING = threading.Lock()


def parsed_json_in_turn(model: type[_Model], body: bytes | bytearray) -> _Model:
    """``parsed_json`` for a heavy request's thread (never the event loop's): one such parse
    at a time per process, so the loop waits behind one parse at most."""
    with _PARSING:
        return parsed_json(model, body)


def _media_type(request: Request) -> tuple[str | None, dict[str, str]]:
    """The Content-Type's ``type/subtype`` (lower case) and its parameters."""
    value = request.headers.get("content-type")
    if value is None:
        return None, {}
    media_type, *params = (part.strip() for part in value.split(";"))
    parsed = {}
    for param in params:
        name, _, param_value = param.partition("=")
        parsed[name.strip().lower()] = param_value.strip().strip('"').lower()
    return media_type.lower(), parsed


def require_json(request: Request) -> None:
    """415 unless the body is declared as JSON."""
    media_type, _ = _media_type(request)
    if media_type != "application/json":
        raise HTTPException(
            415, f"send the body as application/json, not {media_type or 'untyped bytes'}"
        )


async def read_capped(request: Request, limit: int, *, setting: str = "") -> bytearray:
    """The body, refused with 413 as soon as it is known to exceed ``limit`` bytes (the
    sentence names ``setting``, the DOCPIPE_* setting of the limit, when there is one): from
    Content-Length before reading, else while reading (never more than limit + one chunk).
    A bytearray, not bytes: copying a body at the limit would double what it holds."""
    named = f" ({setting})" if setting else ""
    too_large = HTTPException(413, f"the body is larger than the limit of {limit} bytes{named}")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return body


async def spool_capped(request: Request, into: IO[bytes], limit: int) -> None:
    """The body written to ``into`` as it arrives (a spooled file: on disk past its first
    MiB), refused with 413 as ``read_capped`` refuses it."""
    async for chunk in capped_stream(request, limit):
        into.write(chunk)


async def capped_stream(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    """The body's chunks as they arrive, refused with 413 as ``read_capped`` refuses it."""
    too_large = HTTPException(413, f"the body is larger than the limit of {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        yield chunk


@dataclass(frozen=True)
class Upload:
    """A document as uploaded: text, or a file (PDF, DOCX, image) with the format its bytes show,
    spooled to disk past its first MiB (``file``, open while the request is handled)."""

    format: DocumentFormat
    text: str = ""
    file: IO[bytes] | None = None


# PDF readers take the header within the first KiB: what is read before the limit is known.
_HEAD_BYTES = 1024
# What an upload keeps in memory: a file's first MiB (past it, the spooled file is on disk)
# and one MiB on its way there.
_SPOOL_BYTES = 1 << 20
_WRITE_BYTES = 1 << 20


@dataclass(frozen=True)
class _SizeLimit:
    bytes: int
    what: str  # "a PDF", ...
    setting: str

    def refusal(self) -> HTTPException:
        return HTTPException(
            413,
            f"the body is larger than the limit of {self.bytes} bytes "
            f"for {self.what} ({self.setting})",
        )


def _size_limit(fmt: DocumentFormat | None, settings: Settings) -> _SizeLimit:
    if fmt is DocumentFormat.PDF:
        return _SizeLimit(settings.max_pdf_bytes, "a PDF", "DOCPIPE_MAX_PDF_BYTES")
    if fmt in IMAGE_FORMATS:
        return _SizeLimit(settings.max_image_bytes, "an image", "DOCPIPE_MAX_IMAGE_BYTES")
    if fmt is DocumentFormat.DOCX:
        return _SizeLimit(settings.max_docx_bytes, "a DOCX", "DOCPIPE_MAX_DOCX_BYTES")
    return _SizeLimit(settings.max_document_bytes, "a text", "DOCPIPE_MAX_DOCUMENT_BYTES")


async def _document_upload(request: Request, resources: ResourcesDep) -> AsyncIterator[Upload]:
    """The body as a document. Its format comes from its bytes: a PDF or DOCX whatever the
    Content-Type says; text only as declared (text/plain in UTF-8, or JSON {"text"}), as
    before; anything else 415. 413 past the format's limit, known from the first KiB: from
    Content-Length before reading on, else as soon as the body passes it. A file is spooled
    to disk as it arrives, so the API holds about 2 MiB of it whatever its size, and judged
    off the event loop (a heavy request: docpipe_api.heavy)."""
    settings = resources.settings
    chunks = request.stream().__aiter__()
    head = bytearray()
    async for chunk in chunks:
        head += chunk
        if len(head) >= _HEAD_BYTES:
            break
    candidate = format_of_head(bytes(head[:_HEAD_BYTES]))
    limit = _size_limit(candidate, settings)
    declared = request.headers.get("content-length", "")
    if (declared.isdigit() and int(declared) > limit.bytes) or len(head) > limit.bytes:
        raise limit.refusal()
    if candidate is None:
        body = head
        async for chunk in chunks:
            body += chunk
            if len(body) > limit.bytes:
                raise limit.refusal()
        yield _text_upload(request, bytes(body))
        return
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as file:
        await _spool(head, chunks, file, limit)
        judged = partial(_judged_file, _media_type(request)[0], file, candidate, settings)
        yield Upload(await resources.heavy.run("checking an uploaded file", judged), file=file)


@dataclass(frozen=True)
class Refusal:
    """Why a file sent as a part of a multipart body is not taken (status and message)."""

    status: int
    detail: str

    def error(self, where: str) -> HTTPException:
        return HTTPException(self.status, f"{where}: {self.detail}")


async def judged_file(
    file: IO[bytes], resources: Resources, media_type: str | None
) -> Upload | Refusal:
    """A file already spooled (a part of a multipart body) held to what a document's body
    is held to: a file format its bytes show (no text: 415), its format's size limit (413),
    then the checks of ``_judged_file``; its refusal otherwise (Busy goes on up: 503)."""
    settings = resources.settings
    candidate = format_of_head(file.read(_HEAD_BYTES))
    size = file.seek(0, os.SEEK_END)
    file.seek(0)
    try:
        if candidate is None:
            raise _unsupported(media_type)
        limit = _size_limit(candidate, settings)
        if size > limit.bytes:
            raise limit.refusal()
        judged = partial(_judged_file, media_type, file, candidate, settings)
        return Upload(await resources.heavy.run("checking an uploaded file", judged), file=file)
    except HTTPException as exc:
        return Refusal(exc.status_code, str(exc.detail))
    except InvalidRequestError as exc:
        return Refusal(422, str(exc))


def _judged_file(
    media_type: str | None, file: IO[bytes], candidate: DocumentFormat, settings: Settings
) -> DocumentFormat:
    """The file's format, once what is cheap to see at upload is checked (a zip's end
    record, then its directory; an image's header): 415 for a zip that is no Word file, 422
    for a bomb."""
    try:
        fmt = sniff_format(file)
        if fmt is None:  # a zip, but no Word file
            raise _unsupported(media_type)
        check_upload(file, fmt, _zip_bounds(settings), PixelBounds.of(settings))
    except UnreadableDocumentError as exc:
        raise InvalidRequestError(f"the {candidate.upper()} cannot be read: {exc}") from None
    return fmt


async def _spool(
    head: bytearray, chunks: AsyncIterator[bytes], file: IO[bytes], limit: _SizeLimit
) -> None:
    """The body into ``file``, the first bytes already read in ``head``, a MiB at a time
    (disk writes off the event loop); 413 once it passes ``limit``."""
    pending, size = head, len(head)
    async for chunk in chunks:
        size += len(chunk)
        if size > limit.bytes:
            raise limit.refusal()
        pending += chunk
        if len(pending) >= _WRITE_BYTES:
            await anyio.to_thread.run_sync(file.write, bytes(pending))
            pending = bytearray()
    await anyio.to_thread.run_sync(file.write, bytes(pending))
    file.seek(0)


def _unsupported(media_type: str | None) -> HTTPException:
    return HTTPException(
        415,
        f"send {ACCEPTED_FORMATS}: a file as it is, text as text/plain (UTF-8) or as "
        f'application/json {{"text": "..."}}; these bytes are none of them (Content-Type '
        f"{media_type or 'missing'})",
    )


def _text_upload(request: Request, body: bytes) -> Upload:
    media_type, params = _media_type(request)
    if media_type not in ("text/plain", "application/json"):
        raise _unsupported(media_type)
    charset = params.get("charset", "utf-8")
    if media_type == "text/plain" and charset not in ("utf-8", "utf8", "us-ascii"):
        raise HTTPException(415, f"documents must be UTF-8 text, not charset={charset}")
    if media_type == "text/plain":
        try:
            return Upload(DocumentFormat.TEXT, text=body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidRequestError(
                f"the document is not valid UTF-8 (byte {exc.start}: {exc.reason}); docpipe "
                f"takes {ACCEPTED_FORMATS}"
            ) from None
    return Upload(DocumentFormat.TEXT, text=parsed_json(DocumentTextIn, body).text)


def _zip_bounds(settings: Settings) -> ZipBounds:
    return ZipBounds(settings.docx_max_expanded_bytes, settings.docx_max_expansion_ratio)


async def _extract_request(request: Request) -> ExtractIn:
    body = await read_capped(request, MAX_OPTIONS_BYTES)
    if not body.strip():
        return ExtractIn()
    media_type, _ = _media_type(request)
    if media_type != "application/json":
        raise HTTPException(
            415, f"send the options as application/json, not {media_type or 'untyped bytes'}"
        )
    return parsed_json(ExtractIn, body)


DocumentUploadDep = Annotated[Upload, Depends(_document_upload)]
ExtractRequestDep = Annotated[ExtractIn, Depends(_extract_request)]
