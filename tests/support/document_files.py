"""Files for the document-format tests: the sample contracts in each format, and bad files
of every kind docpipe refuses, made here (nothing is downloaded)."""

from __future__ import annotations

import io
import random
import struct
import zipfile

from fpdf import FPDF

from docpipe_dev.sample_files import contract_docx, contract_pdf, contract_scan


def contract_as(fmt: str, text: str, seed: int = 0) -> bytes:
    """A contract's text as a text, pdf, docx or scan file's bytes."""
    if fmt == "scan":
        return contract_scan(text, seed)
    if fmt == "text":
        return text.encode()
    return {"pdf": contract_pdf, "docx": contract_docx}[fmt](text)


def pdf_of_pages(pages: list[str], *, password: str | None = None) -> bytes:
    pdf = FPDF()
    if password is not None:
        pdf.set_encryption(owner_password="owner-" + password, user_password=password)
    for text in pages:
        pdf.add_page()
        pdf.set_font("Helvetica", size=11)
        if text:
            pdf.multi_cell(0, 6, text)
    return bytes(pdf.output())


def encrypted_pdf() -> bytes:
    return pdf_of_pages(["1. TERM\nThe term is twelve months."], password="secret")


def truncated_pdf() -> bytes:
    """A real PDF cut in the middle of its objects: damaged, not something else."""
    whole = pdf_of_pages(["1. TERM\nThe term is twelve months."] * 3)
    return whole[: len(whole) // 2]


def pdf_header_on_text() -> bytes:
    """A PDF's magic number in front of something that is no PDF at all."""
    return b"%PDF-1.7\n" + b"Dear customer, please find our offer below.\n" * 40


def blank_pdf(pages: int = 2) -> bytes:
    """Pages without any text, drawn or typed: nothing to extract, even by OCR."""
    return pdf_of_pages([""] * pages)


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def not_a_docx_zip() -> bytes:
    """A zip without Word's main part (a spreadsheet, an archive): an unknown format."""
    return _zip({"[Content_Types].xml": b"<Types/>", "xl/workbook.xml": b"<workbook/>"})


def docx_declaring_a_bomb(expanded: int = 300_000_000) -> bytes:
    """A DOCX whose central directory declares ``expanded`` bytes: refused at upload."""
    return _lie_about_size(
        contract_docx("1. TERM\n\nTwelve months."), "word/document.xml", expanded
    )


def docx_hiding_a_bomb(expanded: int = 50_000_000) -> bytes:
    """A DOCX whose document part inflates to ``expanded`` bytes while its directory
    declares 1 kB: it passes the upload's look at the directory, the worker finds it."""
    members = {"[Content_Types].xml": b"<Types/>", "word/document.xml": b" " * expanded}
    return _lie_about_size(_zip(members), "word/document.xml", 1000)


def _lie_about_size(data: bytes, member: str, size: int) -> bytes:
    """``data`` with ``member``'s uncompressed size set to ``size`` in its local header and
    in the central directory."""
    patched = bytearray(data)
    for signature, name_at, size_at, name_from in (
        (b"PK\x03\x04", 26, 22, 30),
        (b"PK\x01\x02", 28, 24, 46),
    ):
        at = patched.find(signature)
        while at >= 0:
            length = struct.unpack_from("<H", patched, at + name_at)[0]
            if patched[at + name_from : at + name_from + length] == member.encode():
                struct.pack_into("<I", patched, at + size_at, size)
            at = patched.find(signature, at + 4)
    return bytes(patched)


def pdf_with_a_formula_drawn_glyph_by_glyph(seed: int = 0) -> tuple[bytes, str]:
    """A page whose sentence holds a formula drawn one glyph at a time, in a shuffled order,
    with a superscript set smaller and higher, as equation typesetters draw them; and the
    sentence as it reads."""
    before, after = "The monthly fee is", "for each site."
    formula = list("F = a \u00d7 b2 + c")
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    x, y = 20.0, 40.0
    pdf.text(x, y, before)
    x += pdf.get_string_width(before + " ")
    glyphs = []
    for i, glyph in enumerate(formula):
        superscript = glyph == "2" and formula[i - 1] == "b"
        size = 8 if superscript else 12
        pdf.set_font_size(size)
        if glyph != " ":
            glyphs.append((x, y - (2.0 if superscript else 0.0), size, glyph))
        x += pdf.get_string_width(glyph)
    random.Random(seed).shuffle(glyphs)
    for gx, gy, size, glyph in glyphs:
        pdf.set_font_size(size)
        pdf.text(gx, gy, glyph)
    pdf.set_font_size(12)
    pdf.text(x + pdf.get_string_width(" "), y, after)
    return bytes(pdf.output()), f"{before} {''.join(formula)} {after}"


def shifted(text: str) -> str:
    """Letters shifted by three, as a font with the wrong encoding maps them."""
    return "".join(chr((ord(c) - 97 + 3) % 26 + 97) if "a" <= c <= "z" else c for c in text)


def bad_ocr(text: str, share: float = 0.3, seed: int = 0) -> str:
    """Letters and digits replaced, a ``share`` of them, by the symbols a bad OCR reads."""
    rng = random.Random(seed)
    return "".join(
        rng.choice("«»*^/3E#@%&|~") if c.isalnum() and rng.random() < share else c for c in text
    )
