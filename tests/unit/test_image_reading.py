"""Images as documents, read with the real Tesseract: a phone's photo of a contract page
(JPEG, turned a little, noisy, in colour) and a scanner's two-page TIFF read like a scanned
PDF (text, orientation, where the words stand in points); an image stored sideways with an
EXIF orientation read as viewers show it; a JPEG past the pixel bound decoded smaller; and
the hostile images refused before a pixel is decoded, at upload and when read."""

from __future__ import annotations

import io
import random
import time
from functools import cache

import pytest
from PIL import Image

from docpipe.errors import UnreadableDocumentError
from docpipe.extraction import DocumentFormat, check_upload, format_of_head, sniff_format
from docpipe.extraction.images import PixelBounds, render_image_page
from docpipe.extraction.pages import PageText
from docpipe.extraction.zipguard import ZipBounds
from docpipe.settings import Settings
from docpipe.worker.text_extraction import open_reader
from docpipe_dev.hostile.corpus import CORPUS, HostileFile
from docpipe_dev.sample_files import contract_photo, contract_tiff
from docpipe_dev.samples import sample_contracts
from docpipe_dev.word_recall import word_recall

SETTINGS = Settings()
CONTRACT = sample_contracts(3)[2]
ZIP_BOUNDS = ZipBounds(SETTINGS.docx_max_expanded_bytes, SETTINGS.docx_max_expansion_ratio)
IMAGES = [f for f in CORPUS if f.fmt in ("png", "jpeg", "tiff")]


def read_all(data: bytes, settings: Settings = SETTINGS) -> list[PageText]:
    fmt = sniff_format(data)
    assert fmt is not None
    reader = open_reader(fmt, data, settings)
    try:
        return [reader.read_page(i) for i in range(reader.page_count)]
    finally:
        reader.close()


@cache
def photo() -> bytes:
    return contract_photo(CONTRACT.text, seed=1)


@cache
def photo_pages() -> list[PageText]:
    return read_all(photo())


def page_text(index: int = 0) -> str:
    """The contract's words on a page, as the typeset PDF has them."""
    reader = open_reader(DocumentFormat.PDF, _pdf(), SETTINGS)
    try:
        return reader.read_page(index).text
    finally:
        reader.close()


@cache
def _pdf() -> bytes:
    from docpipe_dev.sample_files import contract_pdf

    return contract_pdf(CONTRACT.text)


def test_each_image_format_is_told_by_its_bytes() -> None:
    tiff = contract_tiff("1. TERM\n\nTwelve months.")
    assert sniff_format(photo()) is DocumentFormat.JPEG
    assert sniff_format(tiff) is DocumentFormat.TIFF
    png = io.BytesIO()
    Image.new("L", (8, 8), 255).save(png, format="PNG")
    assert sniff_format(png.getvalue()) is DocumentFormat.PNG
    assert format_of_head(b"MM\x00*\x00\x00\x00\x08") is DocumentFormat.TIFF
    assert sniff_format(b"GIF89a\x01\x00\x01\x00") is None  # not a format docpipe reads


@pytest.mark.slow  # OCR of whole pages (4-12 s each)
def test_a_photographed_contract_page_reads_like_a_scan() -> None:
    [page] = photo_pages()
    assert page.ocr and page.confidence is not None and page.confidence > 85
    assert word_recall(page_text(), page.text) >= 0.95, page.text
    assert (page.rotation, page.warnings) == (0, ())
    # Its pixels in points as if the photo were an A4 page (it states no resolution).
    assert page.geometry is not None
    assert page.geometry.height == pytest.approx(842, abs=1)
    assert 560 < page.geometry.width < 640  # A4's 595, and the margin the turn added


@pytest.mark.parametrize("left_s", [0.0, 0.3], ids=["none-left", "less-than-the-ocr-takes"])
def test_a_page_whose_ocr_cannot_end_by_its_deadline_fails_too_slow(left_s: float) -> None:
    """The caller's deadline (the step's time) is not the OCR's own limit: past it the page
    fails too_slow, never a page without text and a warning."""
    reader = open_reader(DocumentFormat.JPEG, photo(), SETTINGS)
    try:
        with pytest.raises(UnreadableDocumentError) as refused:
            reader.read_page(0, deadline=time.monotonic() + left_s)
    finally:
        reader.close()
    assert refused.value.kind == "too_slow", refused.value


@pytest.mark.slow  # OCR of whole pages (4-12 s each)
def test_a_two_page_tiff_is_two_pages_at_the_resolution_it_states() -> None:
    pages = read_all(contract_tiff(CONTRACT.text, seed=1))
    assert len(pages) == 2 and all(p.ocr for p in pages)
    assert pages[0].geometry is not None
    # A4 at the 200 dpi it states: 595 x 842 points.
    assert pages[0].geometry.width == pytest.approx(595, abs=2)
    for index, page in enumerate(pages):
        assert word_recall(page_text(index), page.text) >= 0.95, (index, page.text)


@pytest.mark.slow  # OCR of whole pages (4-12 s each)
def test_an_image_stored_sideways_with_its_exif_orientation_reads_as_viewers_show_it() -> None:
    upright = Image.open(io.BytesIO(photo()))
    stored = upright.rotate(90, expand=True)  # as a phone stores it: the sensor's way
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to show": undoes the 90 counter-clockwise above
    data = io.BytesIO()
    stored.save(data, format="JPEG", quality=90, exif=exif)
    [page] = read_all(data.getvalue())
    assert page.rotation == 0, "upright once its orientation is applied: nothing left to turn"
    assert word_recall(page_text(), page.text) >= 0.95


@pytest.mark.slow  # OCR of whole pages (4-12 s each)
def test_a_jpeg_past_the_pixel_bound_is_decoded_smaller_with_a_warning() -> None:
    settings = Settings(max_page_pixels=1_200_000, ocr_min_dpi=90)
    [page] = read_all(photo(), settings)
    assert [(w.kind, w.page) for w in page.warnings] == [("reduced_resolution", 1)]
    assert page.warnings[0].value is not None
    assert 95 < page.warnings[0].value < 110  # about 205 dpi decoded at 1/2
    assert word_recall(page_text(), page.text) >= 0.8
    # Decoded smaller, its words still stand where they do on the page.
    assert page.geometry is not None and page.geometry.height == pytest.approx(842, abs=1)
    # Below the least readable resolution it is refused, as a PDF page would be.
    with pytest.raises(UnreadableDocumentError) as refused:
        read_all(photo(), Settings(max_page_pixels=1_200_000, ocr_min_dpi=120))
    assert refused.value.kind == "page_too_large"


@pytest.mark.parametrize("hostile", IMAGES, ids=lambda f: f.name)
def test_each_hostile_image_is_refused_at_upload_and_when_read(hostile: HostileFile) -> None:
    data = hostile.make()
    fmt = sniff_format(data)
    assert fmt == hostile.fmt
    started = time.monotonic()
    with pytest.raises(UnreadableDocumentError) as at_upload:
        check_upload(data, fmt, ZIP_BOUNDS, PixelBounds.of(SETTINGS))
    assert at_upload.value.kind == hostile.kind, at_upload.value
    with pytest.raises(UnreadableDocumentError) as when_read:
        read_all(data)
    assert when_read.value.kind == hostile.kind, when_read.value
    assert time.monotonic() - started < 5, "refused before a pixel is decoded"


def test_a_png_bombs_refusal_says_what_it_states_and_the_bound() -> None:
    flood = next(f for f in IMAGES if f.name == "png-grey-flood").make()
    with pytest.raises(UnreadableDocumentError) as refused:
        check_upload(flood, DocumentFormat.PNG, ZIP_BOUNDS, PixelBounds.of(SETTINGS))
    assert "page 1 states 10000 x 10000 pixels (100,000,000) in a file of " in str(refused.value)
    assert "a decompression bomb (more than 25,000,000 pixels, DOCPIPE_MAX_PAGE_PIXELS)" in str(
        refused.value
    )


def test_a_large_honest_png_is_too_large_not_a_bomb() -> None:
    # Noise (it does not compress, as a photo does not), the same every run.
    noise = Image.frombytes("L", (1500, 1000), random.Random(0).randbytes(1_500_000))
    data = io.BytesIO()
    noise.save(data, format="PNG")
    bounds = PixelBounds(max_pixels=1_000_000, max_pages=5, min_dpi=100)
    with pytest.raises(UnreadableDocumentError) as refused:
        check_upload(data.getvalue(), DocumentFormat.PNG, ZIP_BOUNDS, bounds)
    assert refused.value.kind == "page_too_large"
    assert "send it scaled down, or as a PDF" in str(refused.value)


def test_a_damaged_image_is_corrupt() -> None:
    broken = photo()[: len(photo()) // 3]  # cut off: its header is whole, its pixels not
    check_upload(broken, DocumentFormat.JPEG, ZIP_BOUNDS, PixelBounds.of(SETTINGS))
    with pytest.raises(UnreadableDocumentError) as refused:
        read_all(broken)
    assert refused.value.kind == "corrupt"
    assert "Traceback" not in str(refused.value)


def test_a_page_image_is_upright_within_its_pixels() -> None:
    png, width, height = render_image_page(
        io.BytesIO(photo()), "jpeg", 0, rotation=90, decode_pixels=25_000_000, max_pixels=400_000
    )
    assert width * height <= 400_000
    shown = Image.open(io.BytesIO(png))
    assert (shown.format, shown.size, shown.mode) == ("PNG", (width, height), "L")
    assert width > height, "turned 90 degrees as extraction read it"
