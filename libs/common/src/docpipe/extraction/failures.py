"""Every failure out of a reader as a kind a tenant can act on, never as the place the code
broke: an ``OverflowError`` or a ``RecursionError`` a crafted file provoked, a library's
error on bytes it did not expect, each becomes an
:class:`~docpipe.errors.UnreadableDocumentError` of a documented kind (``too_complex`` for
recursion, ``corrupt`` for the rest), with the exception itself in the worker's log.

Errors that are not the document's stay what they are: the soft time limit's interruption,
PostgreSQL's errors, ``MemoryError``, and everything else outside this list.
"""

from __future__ import annotations

import logging
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import pypdfium2 as pdfium
from lxml import etree
from PIL import Image

from docpipe.errors import UnreadableDocumentError

__all__ = ["as_unreadable"]

log = logging.getLogger(__name__)

# What a reader's libraries raise on bytes they did not expect.
_DAMAGE = (
    ArithmeticError,  # OverflowError: a number past a C integer
    LookupError,
    ValueError,  # UnicodeError too
    TypeError,
    AttributeError,
    EOFError,
    zlib.error,
    struct.error,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    etree.LxmlError,
    pdfium.PdfiumError,
    Image.DecompressionBombError,
)


@contextmanager
def as_unreadable(what: str) -> Iterator[None]:
    """Reading ``what`` ("the Word file", "page 3"): any failure in :data:`_DAMAGE` or a
    RecursionError leaves as UnreadableDocumentError."""
    try:
        yield
    except UnreadableDocumentError:
        raise
    except RecursionError:
        log.warning("%s nests too deep to read", what, exc_info=True)
        raise UnreadableDocumentError(
            f"{what} nests its content deeper than docpipe reads", kind="too_complex"
        ) from None
    except _DAMAGE as exc:
        log.warning("%s could not be read: %s", what, type(exc).__name__, exc_info=True)
        raise UnreadableDocumentError(
            f"{what} holds data docpipe cannot read", kind="corrupt"
        ) from None
