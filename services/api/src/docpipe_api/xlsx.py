"""An XLSX workbook written as it streams: a zip of a few XML parts whose first sheet is
written row by row as the rows come, the other sheets kept in spooled files (memory up to
a few MB, then disk) until the first ends, then appended. Nothing but the rows of one
chunk sits in memory, whatever the number of rows.

The parts are the few a workbook needs (Office Open XML, ECMA-376 part 1): the content
types, the package's and the workbook's relationships, the workbook, a style sheet (a bold
header, a grey row of paths) and one worksheet per sheet. Text goes in inline strings, so
a spreadsheet never reads a cell as a formula. A text cell holds at most 32,767 characters
(the format's limit): a longer one is cut and says so (docpipe.pipelines.columns.CUT_MARK).
"""

from __future__ import annotations

import math
import re
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, Any
from xml.sax.saxutils import escape, quoteattr

from docpipe.pipelines.columns import CUT_MARK, MAX_CELL_CHARS

__all__ = ["MEDIA_TYPE", "Sheet", "XlsxStream", "column_letters"]

MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
HEADER, PATHS = 1, 2  # cell styles: bold; grey italics
# Characters XML 1.0 cannot hold, even escaped: dropped from text cells.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_SPOOL_BYTES = 8 << 20

_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_CT = "application/vnd.openxmlformats-officedocument.spreadsheetml"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
_STYLES = (
    f'{_DECLARATION}<styleSheet xmlns="{_MAIN}">'
    '<fonts count="3"><font><sz val="11"/><name val="Calibri"/></font>'
    '<font><b/><sz val="11"/><name val="Calibri"/></font>'
    '<font><i/><sz val="9"/><color rgb="FF808080"/><name val="Calibri"/></font></fonts>'
    '<fills count="2"><fill><patternFill patternType="none"/></fill>'
    '<fill><patternFill patternType="gray125"/></fill></fills>'
    '<borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders>'
    '<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs>'
    '<cellXfs count="3"><xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/>'
    '<xf numFmtId="0" fontId="1" fillId="0" borderId="0" xfId="0" applyFont="1"/>'
    '<xf numFmtId="0" fontId="2" fillId="0" borderId="0" xfId="0" applyFont="1"/></cellXfs>'
    '<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles>'
    "</styleSheet>"
)


@dataclass(frozen=True)
class Sheet:
    """A sheet's name, its columns' widths (characters) and its header rows (frozen)."""

    name: str
    widths: Sequence[int]
    header_rows: int


class _Sink:
    """Where the zip writes: bytes taken away as they come (the zip is never sought)."""

    def __init__(self) -> None:
        self._data = bytearray()

    def write(self, data: bytes) -> int:
        self._data += data
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def take(self) -> bytes:
        data, self._data = bytes(self._data), bytearray()
        return data


class XlsxStream:
    """A workbook of ``sheets``: rows added to any sheet, bytes taken as they are ready,
    :meth:`finish` for the rest. The first sheet is the one streamed."""

    def __init__(self, sheets: Sequence[Sheet]) -> None:
        self._sheets = sheets
        self._rows = [0] * len(sheets)
        self._sink = _Sink()
        self._zip = zipfile.ZipFile(self._sink, "w", zipfile.ZIP_DEFLATED, compresslevel=5)
        for name, text in self._package_parts():
            self._zip.writestr(_entry(name), text)
        self._first: IO[bytes] = self._zip.open(_entry(_sheet_part(0)), "w")
        self._first.write(_sheet_start(sheets[0]))
        # Closed by finish() or close(), whichever the export's end calls.
        self._spools = [
            tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115
            for _ in sheets[1:]
        ]

    def add_row(self, sheet: int, cells: Sequence[Any], style: int = 0) -> None:
        self._rows[sheet] += 1
        row = _row_xml(self._rows[sheet], cells, style)
        (self._first if sheet == 0 else self._spools[sheet - 1]).write(row)

    def take(self) -> bytes:
        """The bytes of the workbook written since the last take."""
        return self._sink.take()

    def finish(self) -> Iterator[bytes]:
        """The rest of the workbook: the first sheet's end, the other sheets, the zip's
        directory; a block at a time."""
        self._first.write(_SHEET_END)
        self._first.close()
        yield self.take()
        for index, spool in enumerate(self._spools, start=1):
            spool.seek(0)
            with self._zip.open(_entry(_sheet_part(index)), "w") as part:
                part.write(_sheet_start(self._sheets[index]))
                while block := spool.read(1 << 20):
                    part.write(block)
                    yield self.take()
                part.write(_SHEET_END)
            spool.close()
        self._zip.close()
        yield self.take()

    def close(self) -> None:
        """Frees the spooled sheets (an export broken off before it finished)."""
        for spool in self._spools:
            spool.close()

    def _package_parts(self) -> list[tuple[str, str]]:
        count = len(self._sheets)
        overrides = "".join(
            f'<Override PartName="/{_sheet_part(i)}" ContentType="{_CT}.worksheet+xml"/>'
            for i in range(count)
        )
        sheets = "".join(
            f'<sheet name={quoteattr(s.name)} sheetId="{i + 1}" r:id="rId{i + 1}"/>'
            for i, s in enumerate(self._sheets)
        )
        relations = "".join(
            f'<Relationship Id="rId{i + 1}" Type="{_REL}/worksheet" '
            f'Target="worksheets/sheet{i + 1}.xml"/>'
            for i in range(count)
        )
        return [
            (
                "[Content_Types].xml",
                f'{_DECLARATION}<Types xmlns="http://schemas.openxmlformats.org/package/2006/'
                'content-types"><Default Extension="rels" ContentType="application/'
                'vnd.openxmlformats-package.relationships+xml"/>'
                '<Default Extension="xml" ContentType="application/xml"/>'
                f'<Override PartName="/xl/workbook.xml" ContentType="{_CT}.sheet.main+xml"/>'
                f'<Override PartName="/xl/styles.xml" ContentType="{_CT}.styles+xml"/>'
                f"{overrides}</Types>",
            ),
            (
                "_rels/.rels",
                f'{_DECLARATION}<Relationships xmlns="{_PKG_REL}"><Relationship Id="rId1" '
                f'Type="{_REL}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
            ),
            (
                "xl/workbook.xml",
                f'{_DECLARATION}<workbook xmlns="{_MAIN}" xmlns:r="{_REL}">'
                f"<sheets>{sheets}</sheets></workbook>",
            ),
            (
                "xl/_rels/workbook.xml.rels",
                f'{_DECLARATION}<Relationships xmlns="{_PKG_REL}">{relations}'
                f'<Relationship Id="rId{count + 1}" Type="{_REL}/styles" '
                'Target="styles.xml"/></Relationships>',
            ),
            ("xl/styles.xml", _STYLES),
        ]


_SHEET_END = b"</sheetData></worksheet>"


def _entry(name: str) -> zipfile.ZipInfo:
    """A part of the zip, dated 1980-01-01 (the zip format's first day), so that the same
    results make the same bytes."""
    entry = zipfile.ZipInfo(name)
    entry.compress_type = zipfile.ZIP_DEFLATED
    return entry


def _sheet_part(index: int) -> str:
    return f"xl/worksheets/sheet{index + 1}.xml"


def _sheet_start(sheet: Sheet) -> bytes:
    frozen = (
        f'<pane ySplit="{sheet.header_rows}" topLeftCell="A{sheet.header_rows + 1}" '
        'activePane="bottomLeft" state="frozen"/>'
        if sheet.header_rows
        else ""
    )
    cols = "".join(
        f'<col min="{i}" max="{i}" width="{w}" customWidth="1"/>'
        for i, w in enumerate(sheet.widths, start=1)
    )
    return (
        f'{_DECLARATION}<worksheet xmlns="{_MAIN}" xmlns:r="{_REL}">'
        f'<sheetViews><sheetView workbookViewId="0">{frozen}</sheetView></sheetViews>'
        f"{f'<cols>{cols}</cols>' if cols else ''}<sheetData>"
    ).encode()


def column_letters(index: int) -> str:
    """The letters of the 0-based column ``index``: A, ..., Z, AA, ..."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def _row_xml(number: int, cells: Sequence[Any], style: int) -> bytes:
    styled = f' s="{style}"' if style else ""
    parts = [f'<row r="{number}">']
    for index, value in enumerate(cells):
        ref = f"{column_letters(index)}{number}"
        if value is None or value == "" or (isinstance(value, float) and not math.isfinite(value)):
            continue
        if isinstance(value, bool):
            parts.append(f'<c r="{ref}"{styled} t="b"><v>{int(value)}</v></c>')
        elif isinstance(value, int | float | Decimal):
            parts.append(f'<c r="{ref}"{styled}><v>{value}</v></c>')
        else:
            text = _cell_text(str(value))
            parts.append(
                f'<c r="{ref}"{styled} t="inlineStr"><is><t xml:space="preserve">'
                f"{escape(text)}</t></is></c>"
            )
    parts.append("</row>")
    return "".join(parts).encode()


def _cell_text(text: str) -> str:
    text = _NOT_XML.sub("", text)
    if len(text) <= MAX_CELL_CHARS:
        return text
    mark = CUT_MARK.format(chars=len(text))
    return text[: MAX_CELL_CHARS - len(mark)] + mark
