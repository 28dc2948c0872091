"""The sample contracts as people send them: a PDF with a text layer (fpdf2), a Word file
(python-docx: headings, paragraphs, a table of the parties), a scanned PDF (the PDF's
pages rendered to greyscale images with a little noise and rotation, no text layer), a
phone's photo of its first page (JPEG) and a two-page TIFF from a scanner; and as they also
come: in two columns, scanned sideways, scanned with a bad earlier OCR's text layer."""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from pathlib import Path
from statistics import NormalDist

import docx
import pypdfium2 as pdfium
from fpdf import FPDF
from fpdf.enums import TextMode
from PIL import Image, ImageChops, ImageFilter

__all__ = [
    "FORMATS",
    "SUFFIXES",
    "contract_docx",
    "contract_in_columns",
    "contract_pdf",
    "contract_pdf_with_photos",
    "contract_photo",
    "contract_scan",
    "contract_tiff",
    "scan_with_text_layer",
    "write_contract",
]

FORMATS = ("text", "pdf", "docx", "scan", "photo", "tiff")
SUFFIXES = {
    "text": ".txt",
    "pdf": ".pdf",
    "docx": ".docx",
    "scan": ".scan.pdf",
    "photo": ".photo.jpg",
    "tiff": ".tiff",
}
# Scans at 200 dpi in black and white keep a 5-page contract near 250 kB (DOCPIPE_MAX_DOCUMENT_BYTES
# is 1 MB by default) and still read well.
_SCAN_DPI = 200


def _paragraphs(text: str) -> Iterator[str]:
    yield from (p.strip() for p in text.split("\n\n") if p.strip())


def _pdf_text(text: str) -> str:
    # PDF's standard fonts have no euro sign; "EUR" says the same to any reader.
    return text.replace("€", "EUR ")


def contract_pdf(text: str) -> bytes:
    """The contract typeset on A4 pages, one paragraph after another, with a text layer."""
    return bytes(_typeset(text).output())


def contract_pdf_with_photos(text: str, total_bytes: int, seed: int = 0) -> bytes:
    """The contract as :func:`contract_pdf` typesets it, then pages of photographs (JPEG
    noise, which nothing compresses) until the file is just under ``total_bytes``: a big
    PDF whose text is still the contract's, each photo captioned so no page needs OCR."""
    rng = random.Random(f"docpipe-photos:{seed}")
    left = total_bytes - len(contract_pdf(text)) - _PHOTO_PAGE_OVERHEAD
    pdf = _typeset(text)
    number = 0
    while left > _PHOTO_PAGE_OVERHEAD:
        side = int((min(left, _PHOTO_BYTES) / _NOISE_JPEG_BYTES_PER_PIXEL) ** 0.5)
        photo = io.BytesIO()
        noise = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
        noise.save(photo, format="JPEG", quality=90)
        if photo.tell() + _PHOTO_PAGE_OVERHEAD > left:
            break
        number += 1
        pdf.add_page()
        pdf.set_font("Helvetica", "", 10)
        pdf.multi_cell(0, 5, f"Annex, photograph {number}: the site as handed over.")
        pdf.image(photo, x=20, y=40, w=170)
        left -= photo.tell() + _PHOTO_PAGE_OVERHEAD
    return bytes(pdf.output())


# A photo page's bytes besides the photo (page, caption, image object); photos of at most
# 5 MB; what a JPEG of noise at quality 90 costs a pixel.
_PHOTO_PAGE_OVERHEAD = 2_000
_PHOTO_BYTES = 5_000_000
_NOISE_JPEG_BYTES_PER_PIXEL = 0.95


def _typeset(text: str) -> FPDF:
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=True, margin=18)
    pdf.set_margins(20, 18, 20)
    pdf.add_page()
    for paragraph in _paragraphs(_pdf_text(text)):
        heading = paragraph.isupper() or (
            paragraph[:3].rstrip(".").isdigit() and paragraph.split(" ", 1)[-1].isupper()
        )
        pdf.set_font("Helvetica", "B" if heading else "", 11 if heading else 10)
        pdf.multi_cell(0, 5, paragraph)
        pdf.ln(3)
    return pdf


def contract_in_columns(text: str) -> bytes:
    """The contract typeset like a newsletter or a paper: its title across the page, then
    two justified columns, the left one filled before the right (a reader that goes line by
    line across the page interleaves them)."""
    title, _, body = _pdf_text(text).partition("\n\n")
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=True, margin=18)
    pdf.set_margins(18, 18, 18)
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 14)
    pdf.multi_cell(0, 8, title, align="C")
    pdf.ln(4)
    pdf.set_font("Helvetica", size=9)
    with pdf.text_columns(ncols=2, gutter=8, text_align="JUSTIFY") as columns:
        for paragraph in _paragraphs(body):
            columns.write(paragraph)
            columns.ln()
            columns.ln()
    return bytes(pdf.output())


def scan_with_text_layer(text: str, layer: str, seed: int = 0) -> bytes:
    """The contract scanned (:func:`contract_scan`, one page), with ``layer`` as its
    invisible text layer over the image, as an earlier OCR leaves one: what a PDF reader
    finds when it looks for text."""
    scan = pdfium.PdfDocument(contract_scan(text, seed))
    try:
        page = scan[0]
        image = page.render(scale=_SCAN_DPI / 72, grayscale=True).to_pil().convert("1")
        page.close()
    finally:
        scan.close()
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=False)
    pdf.add_page()
    pdf.image(image, x=0, y=0, w=pdf.w, h=pdf.h)
    pdf.text_mode = TextMode.INVISIBLE
    pdf.set_font("Helvetica", size=10)
    pdf.set_xy(20, 18)
    pdf.multi_cell(0, 5, _pdf_text(layer))
    return bytes(pdf.output())


def contract_docx(text: str) -> bytes:
    """The contract as a Word file: numbered headings as Heading 1, clauses as paragraphs,
    the first lines (title, reference) as the title and a one-row table."""
    document = docx.Document()
    for paragraph in _paragraphs(text):
        first, _, rest = paragraph.partition(" ")
        if paragraph.isupper() and "\n" not in paragraph:
            document.add_heading(paragraph, level=0 if not first[:1].isdigit() else 1)
        elif first.rstrip(".").isdigit() and rest.isupper():
            document.add_heading(paragraph, level=1)
        elif paragraph.startswith("Contract reference:"):
            label, _, value = paragraph.partition(": ")
            table = document.add_table(rows=1, cols=2)
            table.cell(0, 0).text, table.cell(0, 1).text = label, value
        else:
            document.add_paragraph(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def contract_scan(text: str, seed: int = 0, *, turned: int = 0, blurred: bool = False) -> bytes:
    """The PDF's pages as a scanner returns them: greyscale images, slightly rotated, with
    speckle noise, in a PDF without any text; ``turned`` degrees clockwise (90, 180, 270)
    when the pages went into the scanner sideways or upside down; ``blurred`` out of focus
    past reading (a copy of a copy of a fax: OCR reads little, and that poorly)."""
    rng = random.Random(f"docpipe-scan:{seed}")
    pages = [
        (image.filter(ImageFilter.GaussianBlur(3.5)) if blurred else _scanned(image, rng)).rotate(
            -turned, expand=True
        )
        for image in _rendered_pages(text)
    ]
    buffer = io.BytesIO()
    pages[0].save(
        buffer, format="PDF", save_all=True, append_images=pages[1:], resolution=float(_SCAN_DPI)
    )
    return buffer.getvalue()


def _scanned(page: Image.Image, rng: random.Random) -> Image.Image:
    rotated = page.rotate(
        rng.uniform(-1.2, 1.2), resample=Image.Resampling.BICUBIC, expand=False, fillcolor=255
    )
    # Sparse dark specks, a soft edge, then black and white as a fax-grade scanner stores it
    # (about 35 kB a page).
    specks = _specks(rotated.size, rng)
    speckled = Image.composite(rotated, specks, specks).filter(ImageFilter.GaussianBlur(0.4))
    return speckled.point(lambda v: 255 if v > 150 else 0).convert("1")


# The generators' noise comes from their seeded rng, never from Image.effect_noise: that draws
# from the C library's rand(), whose state is whatever ran before in the process, so the same
# call made a different file each time (and OCR read it a little differently).


def _specks(size: tuple[int, int], rng: random.Random) -> Image.Image:
    """White with sparse black specks, one pixel in about 14,000 (where Gaussian noise of
    sigma 28 around mid-grey falls below 22)."""
    width, height = size
    specks = Image.new("L", size, 255)
    for _ in range(width * height // 14_000):
        specks.putpixel((rng.randrange(width), rng.randrange(height)), 0)
    return specks


def _noise(size: tuple[int, int], sigma: float, rng: random.Random) -> Image.Image:
    """Gaussian noise of ``sigma`` around mid-grey, each pixel drawn from ``rng``."""
    grey = NormalDist(128, sigma)
    table = [min(255, max(0, round(grey.inv_cdf((v + 0.5) / 256)))) for v in range(256)]
    return Image.frombytes("L", size, rng.randbytes(size[0] * size[1])).point(table)


def contract_photo(text: str, seed: int = 0) -> bytes:
    """The contract's first page as a phone photographs it: a little turned (1-1.5 degrees),
    on paper a shade off white with uneven light, sensor noise and a soft focus, in colour,
    as a JPEG without a stated resolution."""
    rng = random.Random(f"docpipe-photo:{seed}")
    page = _rendered_pages(text, limit=1)[0]
    turned = page.rotate(
        rng.choice((-1, 1)) * rng.uniform(1.0, 1.5),
        resample=Image.Resampling.BICUBIC,
        expand=True,
        fillcolor=235,
    )
    # Light falling off from one side, noise, a soft focus.
    light = Image.linear_gradient("L").resize(turned.size).point(lambda v: 255 - v // 8)
    noisy = Image.blend(turned, _noise(turned.size, 40, rng), 0.08)
    grey = ImageChops.multiply(noisy, light).filter(ImageFilter.GaussianBlur(0.7))
    # Paper under warm light: the red channel a little brighter than the blue.
    photo = Image.merge(
        "RGB",
        (
            grey.point(lambda v: min(255, v + 6)),
            grey,
            grey.point(lambda v: max(0, v - 10)),
        ),
    )
    buffer = io.BytesIO()
    photo.save(buffer, format="JPEG", quality=82)
    return buffer.getvalue()


def contract_tiff(text: str, seed: int = 0) -> bytes:
    """The contract's first two pages as a document scanner stores them: one multi-page
    TIFF, black and white (CCITT group 4, the fax compression), at its resolution."""
    rng = random.Random(f"docpipe-tiff:{seed}")
    pages = [_scanned(page, rng) for page in _rendered_pages(text, limit=2)]
    buffer = io.BytesIO()
    pages[0].save(
        buffer,
        format="TIFF",
        save_all=True,
        append_images=pages[1:],
        compression="group4",
        dpi=(_SCAN_DPI, _SCAN_DPI),
    )
    return buffer.getvalue()


def _rendered_pages(text: str, *, limit: int | None = None) -> list[Image.Image]:
    """The pages of :func:`contract_pdf` (the first ``limit``) in grey, at the scans' dpi."""
    source = pdfium.PdfDocument(contract_pdf(text))
    try:
        pages = []
        for index in range(len(source) if limit is None else min(limit, len(source))):
            page = source[index]
            pages.append(page.render(scale=_SCAN_DPI / 72, grayscale=True).to_pil().convert("L"))
            page.close()
        return pages
    finally:
        source.close()


def write_contract(directory: Path, slug: str, text: str, fmt: str, *, seed: int = 0) -> Path:
    """Write a contract's ``text`` in ``fmt`` (one of FORMATS) as ``<slug><suffix>``; its
    path."""
    path = directory / f"{slug}{SUFFIXES[fmt]}"
    if fmt == "text":
        path.write_text(text, encoding="utf-8")
    elif fmt in ("pdf", "docx"):
        path.write_bytes(contract_pdf(text) if fmt == "pdf" else contract_docx(text))
    else:
        makers = {"scan": contract_scan, "photo": contract_photo, "tiff": contract_tiff}
        path.write_bytes(makers[fmt](text, seed))
    return path
