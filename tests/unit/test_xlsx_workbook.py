"""The streamed XLSX workbook, read back by openpyxl (a real reader): typed cells, text
never a formula, the format's cell limit said in the cell, frozen header rows; and the
CLI's download of one, started again when its connection drops, its rows and cut cells
counted."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import openpyxl
import pytest

from docpipe.cli.client import DocpipeClient
from docpipe.pipelines.columns import MAX_CELL_CHARS
from docpipe_api.xlsx import HEADER, PATHS, Sheet, XlsxStream, column_letters


def workbook(rows: list[list[object]], evidence_rows: int = 0, chunk: int = 2) -> bytes:
    """A values sheet (two header rows) and an evidence sheet, the rows added a chunk at a
    time with the bytes taken after each, as the export does."""
    book = XlsxStream([Sheet("Values", [10, 20], 2), Sheet("Evidence", [30], 1)])
    book.add_row(0, ["Document", "Total value: amount"], HEADER)
    book.add_row(0, ["document_id", "extract_fields.fields.total_value.amount"], PATHS)
    book.add_row(1, ["Quote"], HEADER)
    body = book.take()
    for start in range(0, len(rows), chunk):
        for row in rows[start : start + chunk]:
            book.add_row(0, row)
        for n in range(evidence_rows if start == 0 else 0):
            book.add_row(1, [f"quote {n}"])
        body += book.take()
    return body + b"".join(book.finish())


def test_cells_keep_their_types_and_text_is_never_a_formula() -> None:
    long_text = "x" * (MAX_CELL_CHARS + 10)
    rows: list[list[object]] = [
        ["a.pdf", 12, 1.5, True, None, '=HYPERLINK("http://x")', "tab\there\x01", long_text],
        ["b.docx", -3, float("nan"), False, "", "@SUM(A1)", "é \u2013 “ok” <b>&", "short"],
    ]
    body = workbook(rows, evidence_rows=3)
    book = openpyxl.load_workbook(io.BytesIO(body))
    assert book.sheetnames == ["Values", "Evidence"]
    values = book["Values"]
    assert values.freeze_panes == "A3"
    assert [c.value for c in values[1]][:2] == ["Document", "Total value: amount"]
    assert values["A1"].font.b and values["A2"].font.i
    first = [c.value for c in values[3]]
    assert first[:5] == ["a.pdf", 12, 1.5, True, None]
    assert values["F3"].data_type == "s" and first[5] == '=HYPERLINK("http://x")'
    assert first[6] == "tab\there", "a character XML cannot hold is dropped"
    cut = first[7]
    assert len(cut) == MAX_CELL_CHARS and cut.startswith("xxx")
    assert cut.endswith(f"[cut: {MAX_CELL_CHARS + 10:,} characters; the JSON lines hold it whole]")
    second = [c.value for c in values[4]]
    assert second[:6] == ["b.docx", -3, None, False, None, "@SUM(A1)"]
    assert second[6] == "é \u2013 “ok” <b>&"
    evidence = book["Evidence"]
    assert evidence.freeze_panes == "A2"
    assert [r[0] for r in evidence.iter_rows(values_only=True)] == [
        "Quote",
        "quote 0",
        "quote 1",
        "quote 2",
    ]


def test_column_letters_go_on_past_z() -> None:
    assert [column_letters(i) for i in (0, 25, 26, 27, 701, 702)] == [
        "A",
        "Z",
        "AA",
        "AB",
        "ZZ",
        "AAA",
    ]


class _Dropped(httpx.SyncByteStream):
    def __init__(self, body: bytes, cut: int) -> None:
        self._body, self._cut = body, cut

    def __iter__(self) -> Iterator[bytes]:
        yield self._body[: self._cut]
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


@pytest.mark.parametrize("cut", [10, 400])
def test_a_dropped_workbook_download_starts_again_and_counts_its_rows(cut: int) -> None:
    rows: list[list[object]] = [[f"d{i}.pdf", i] for i in range(7)]
    rows[4].append("y" * (MAX_CELL_CHARS + 1))
    body = workbook(rows, evidence_rows=2)
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        stream = _Dropped(body, cut) if len(asked) == 1 else httpx.ByteStream(body)
        headers = {"X-Docpipe-Omitted-Fields": "extract_fields.evidence (why)"}
        return httpx.Response(200, stream=stream, headers=headers)

    client = DocpipeClient(
        "http://api.test", transport=httpx.MockTransport(handler), sleep=lambda _: None
    )
    out = io.BytesIO(b"left over from an earlier file, longer than the cut")
    saved = client.save_batch_workbook("b1", out, status="succeeded", evidence=True)
    assert out.getvalue() == body
    assert (saved.runs, saved.cut_cells) == (7, 1)
    assert saved.omitted == "extract_fields.evidence (why)"
    assert len(asked) == 2
    assert dict(asked[1].url.params) == {
        "format": "xlsx",
        "status": "succeeded",
        "evidence": "true",
    }
