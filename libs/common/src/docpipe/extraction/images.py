"""Images as documents: a PNG, a JPEG or a TIFF (each of its frames a page) is read as a
scanned PDF page is (:mod:`scanned`: upright by Tesseract, words placed in points), and
shown to people as its pages (:func:`render_image_page`).

Decoding an image costs its pixels, whatever its file's size, so the pixel bound applies
before any pixel is decoded: a page is decoded only into at most
``DOCPIPE_MAX_PAGE_PIXELS``. A JPEG larger than that is decoded at 1/2, 1/4 or 1/8 of its
size (its own DCT scaling, which costs only the smaller size), with a
``reduced_resolution`` warning, as long as that stays at ``DOCPIPE_OCR_MIN_DPI`` or finer; a
PNG or TIFF page that does not fit is refused: ``decompression_bomb`` when it states more
than :data:`BOMB_PIXELS_PER_BYTE` pixels per byte of the file (a small file made to expand),
``page_too_large`` otherwise.

An image's resolution (what its pixels are in points, and what Tesseract is told) is the one
it states, when plausible (100-1200 dpi); else the one that makes its longer side an A4
page's (a phone's photo states 72 dpi, or nothing). A JPEG's or TIFF's EXIF orientation is
applied first, as viewers do.
"""

from __future__ import annotations

import io
import math
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, cast

from PIL import Image, ImageOps, UnidentifiedImageError

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction.failures import as_unreadable
from docpipe.extraction.pages import PageLimits, PageText
from docpipe.extraction.pixels import POINTS_PER_INCH
from docpipe.extraction.scanned import PageImage, read_page_image
from docpipe.settings import Settings

__all__ = [
    "BOMB_PIXELS_PER_BYTE",
    "ImageReader",
    "PixelBounds",
    "check_image",
    "render_image_page",
]

# A page image of a document compresses to a byte for every few pixels at best (a blank
# fax-grade page, about 0.02 bytes a pixel); a file stating more pixels per byte than this
# was made to expand.
BOMB_PIXELS_PER_BYTE = 1000
# An image's stated resolution is believed within these; outside, its longer side is taken
# as an A4 page's (11.69 inches).
_PLAUSIBLE_DPI = (100.0, 1200.0)
_A4_LONG_SIDE_IN = 11.69
_LEAST_DPI = 72.0
# A JPEG decodes at 1/1, 1/2, 1/4 or 1/8 of its size for what the smaller size costs.
_JPEG_REDUCTIONS = (1, 2, 4, 8)
# PIL's names of the formats, by docpipe's.
_PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG", "tiff": "TIFF"}


@dataclass(frozen=True)
class PixelBounds:
    """What an image may cost: pixels a page decodes into, and pages."""

    max_pixels: int  # DOCPIPE_MAX_PAGE_PIXELS
    max_pages: int  # DOCPIPE_MAX_DOCUMENT_PAGES
    min_dpi: float  # DOCPIPE_OCR_MIN_DPI: no page is decoded coarser to fit

    @classmethod
    def of(cls, settings: Settings) -> PixelBounds:
        return cls(settings.max_page_pixels, settings.max_document_pages, settings.ocr_min_dpi)


@dataclass(frozen=True)
class _Plan:
    """How one page is decoded: its size as stored, the reduction it is decoded at (1: none),
    and its resolution as stored."""

    width: int
    height: int
    reduction: int
    dpi: float


def check_image(file: IO[bytes], fmt: str, bounds: PixelBounds) -> None:
    """What an upload's header says, with no pixel decoded (UnreadableDocumentError): that it
    is a ``fmt`` image PIL can open, of at most ``max_pages`` pages, each decodable within
    the bound. ``file`` is left where it was."""
    start = file.tell()
    try:
        with _opened(file, fmt) as image:
            size = file.seek(0, io.SEEK_END) - start
            for index in range(_page_count(image, bounds.max_pages)):
                image.seek(index)
                _plan(
                    image, fmt, bounds.max_pixels, size, min_dpi=bounds.min_dpi, what=_page(index)
                )
    finally:
        file.seek(start)


class ImageReader:
    """An opened image: its page count, and one page's OCR at a time."""

    def __init__(self, source: bytes | BinaryIO, fmt: str, limits: PageLimits) -> None:
        file: IO[bytes] = io.BytesIO(source) if isinstance(source, bytes) else source
        self._fmt, self._limits = fmt, limits
        start = file.tell()
        self._size = file.seek(0, io.SEEK_END) - start
        file.seek(start)
        with ExitStack() as stack:
            self._image = stack.enter_context(_opened(file, fmt))
            self.page_count = _page_count(self._image, limits.max_pages)
            self._open = stack.pop_all()

    def close(self) -> None:
        self._open.close()

    def read_page(self, index: int, *, deadline: float | None = None) -> PageText:
        """The page read by OCR, upright; every failure an UnreadableDocumentError;
        ``deadline`` (time.monotonic()): when its OCR must have ended (too_slow)."""
        started = time.monotonic()
        limits, what = self._limits, _page(index)
        with as_unreadable(what), _image_errors(what):
            self._image.seek(index)
            plan = _plan(
                self._image,
                self._fmt,
                limits.max_page_pixels,
                self._size,
                min_dpi=limits.ocr_min_dpi,
                what=what,
            )
            grey = _decoded(self._image, plan)
        dpi = plan.dpi / plan.reduction
        page = PageImage(grey, dpi / POINTS_PER_INCH, round(dpi), reduced=plan.reduction > 1)
        read = read_page_image(index, page, limits, started, deadline)
        limits.check_page_chars(index + 1, len(read.text))
        return read


def render_image_page(
    source: BinaryIO, fmt: str, index: int, *, rotation: int, decode_pixels: int, max_pixels: int
) -> tuple[bytes, int, int]:
    """Page ``index`` (0-based) of the image in ``source`` as people see it: EXIF orientation
    applied, turned ``rotation`` degrees clockwise (as extraction read it), in grey, in at
    most ``max_pixels`` pixels, as PNG with its width and height. Decoded within
    ``decode_pixels`` as extraction decodes it."""
    size = source.seek(0, io.SEEK_END)
    source.seek(0)
    what = _page(index)
    with as_unreadable(what), _image_errors(what), _opened(source, fmt) as image:
        image.seek(index)
        plan = _plan(image, fmt, decode_pixels, size, min_dpi=0, what=what)
        # The smallest decoding that still fills the picture people see.
        wanted = _reduction_for(plan.width, plan.height, max_pixels, fmt)
        grey = _decoded(image, _Plan(plan.width, plan.height, max(plan.reduction, wanted), 0))
    if rotation:
        grey = grey.rotate(-rotation, expand=True)  # PIL turns counter-clockwise
    if grey.width * grey.height > max_pixels:
        factor = math.sqrt(max_pixels / (grey.width * grey.height))
        target = (max(1, int(grey.width * factor)), max(1, int(grey.height * factor)))
        grey = grey.resize(target, Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    grey.save(buffer, format="PNG")
    return buffer.getvalue(), grey.width, grey.height


class _Borrowed:
    """A file PIL may read but not close: closing an image closes its file, and the file is
    its caller's (the API stores the upload after checking it)."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def close(self) -> None:
        """Left open for its owner."""


@contextmanager
def _opened(file: IO[bytes], fmt: str) -> Iterator[Image.Image]:
    """The image in ``file`` as PIL opens it (its header only), which must be a ``fmt``;
    ``file`` stays open."""
    what = "the image"
    with as_unreadable(what), _image_errors(what), warnings.catch_warnings():
        # PIL warns of images past its own pixel limit; the bound here is docpipe's (_plan).
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image = Image.open(cast(IO[bytes], _Borrowed(file)), formats=[_PIL_FORMATS[fmt]])
    try:
        yield image
    finally:
        image.close()


@contextmanager
def _image_errors(what: str) -> Iterator[None]:
    """PIL's errors of a damaged or deceptive image as documented kinds: its own refusal of
    a decompression bomb, and the OSError it raises on bytes it cannot decode."""
    try:
        yield
    except Image.DecompressionBombError:
        raise UnreadableDocumentError(
            f"{what} states more pixels than any image may be decoded into",
            kind="decompression_bomb",
        ) from None
    except UnidentifiedImageError:
        # Its message names the file object PIL was given, which means nothing to a user.
        raise UnreadableDocumentError(
            f"{what} cannot be decoded (its header is damaged)", kind="corrupt"
        ) from None
    except OSError as exc:
        raise UnreadableDocumentError(
            f"{what} cannot be decoded ({' '.join(str(exc).split())[:200]})", kind="corrupt"
        ) from None


def _page_count(image: Image.Image, max_pages: int) -> int:
    """The image's pages (a TIFF's frames), counted up to one past ``max_pages``."""
    count = 1
    while count <= max_pages:
        try:
            image.seek(count)
        except EOFError:
            break
        count += 1
    if count > max_pages:
        raise UnreadableDocumentError(
            f"the image has more than {max_pages} pages (DOCPIPE_MAX_DOCUMENT_PAGES)",
            kind="too_many_pages",
        )
    image.seek(0)
    return count


def _plan(
    image: Image.Image, fmt: str, max_pixels: int, file_bytes: int, *, min_dpi: float, what: str
) -> _Plan:
    """How the current page is decoded within ``max_pixels``; refused (module docstring)
    when it cannot be, or only below ``min_dpi``."""
    width, height = image.size
    if width <= 0 or height <= 0:
        raise UnreadableDocumentError(f"{what} has no pixels ({width} x {height})", kind="corrupt")
    dpi = _resolution(image)
    reduction = _reduction_for(width, height, max_pixels, fmt)
    # A page as small as it was made is read as it is; one reduced to fit must stay legible.
    if reduction == 1 or (reduction > 1 and dpi / reduction >= min_dpi):
        return _Plan(width, height, reduction, dpi)
    pixels = width * height
    if not reduction and pixels > BOMB_PIXELS_PER_BYTE * max(file_bytes, 1):
        raise UnreadableDocumentError(
            f"{what} states {width} x {height} pixels ({pixels:,}) in a file of {file_bytes:,} "
            f"bytes: a decompression bomb (more than {max_pixels:,} pixels, "
            "DOCPIPE_MAX_PAGE_PIXELS)",
            kind="decompression_bomb",
        )
    raise UnreadableDocumentError(
        f"{what} is {width} x {height} pixels ({pixels:,}): more than DOCPIPE_MAX_PAGE_PIXELS="
        f"{max_pixels:,} can be decoded at a readable resolution; send it scaled down, or as a "
        "PDF",
        kind="page_too_large",
    )


def _reduction_for(width: int, height: int, max_pixels: int, fmt: str) -> int:
    """The least reduction (1, or a JPEG's 2, 4, 8) at which the page fits ``max_pixels``;
    0 when none does."""
    for reduction in _JPEG_REDUCTIONS if fmt == "jpeg" else (1,):
        if math.ceil(width / reduction) * math.ceil(height / reduction) <= max_pixels:
            return reduction
    return 0


def _resolution(image: Image.Image) -> float:
    """The page's dots per inch: as stated when plausible, else as if it were A4 high."""
    stated = image.info.get("dpi")
    try:
        dpi = float(stated[0]) if stated else 0.0
    except (TypeError, ValueError, IndexError):
        dpi = 0.0
    low, high = _PLAUSIBLE_DPI
    if low <= dpi <= high:
        return dpi
    return min(high, max(_LEAST_DPI, max(image.size) / _A4_LONG_SIDE_IN))


def _decoded(image: Image.Image, plan: _Plan) -> Image.Image:
    """The current page's pixels in grey, decoded at the plan's reduction (a JPEG's draft
    mode), EXIF orientation applied."""
    if plan.reduction > 1:
        # PIL scales by the least whole ratio of the size to the one asked: ask the floor
        # (libjpeg rounds the result up, as _reduction_for counts it).
        image.draft("L", (plan.width // plan.reduction, plan.height // plan.reduction))
    upright = ImageOps.exif_transpose(image)
    return upright.convert("L")


def _page(index: int) -> str:
    return f"page {index + 1}"
