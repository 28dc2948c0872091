"""The CLI's API client waits out 429s as Retry-After says, a bounded number of times, with
bounded waits; it retries 503 only for reads (a write may have been done)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from docpipe.cli.client import MAX_RETRIES, MAX_WAIT_S, ApiError, DocpipeClient

RUN = {"run_id": "r1", "status": "done"}


def scripted(answers: list[httpx.Response]) -> tuple[DocpipeClient, list[float], list[str]]:
    """A client whose server answers ``answers`` in turn (the last one from then on)."""
    sleeps: list[float] = []
    seen: list[str] = []
    replies: Iterator[httpx.Response] = iter(answers)
    last = answers[-1]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return next(replies, last)

    client = DocpipeClient(
        "http://api.test", transport=httpx.MockTransport(handler), sleep=sleeps.append
    )
    return client, sleeps, seen


def throttled(retry_after: str | None = "2") -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(429, json={"detail": "too many requests"}, headers=headers)


def test_a_429_is_waited_out_as_retry_after_says_then_the_answer_is_returned() -> None:
    client, sleeps, seen = scripted([throttled(), throttled(), httpx.Response(200, json=RUN)])
    assert client.run("r1") == RUN
    assert len(seen) == 3
    assert len(sleeps) == 2 and all(2 <= s <= MAX_WAIT_S for s in sleeps)


def test_without_retry_after_the_waits_back_off_and_a_huge_one_is_capped() -> None:
    answers = [throttled(None), throttled("86400"), httpx.Response(200, json=RUN)]
    client, sleeps, _ = scripted(answers)
    assert client.run("r1") == RUN
    assert sleeps[0] < MAX_WAIT_S and sleeps[1] <= MAX_WAIT_S


def test_throttled_for_good_the_client_gives_up_with_the_apis_answer() -> None:
    client, sleeps, seen = scripted([throttled("1")])
    with pytest.raises(ApiError) as refused:
        client.run("r1")
    assert refused.value.status == 429
    assert (len(sleeps), len(seen)) == (MAX_RETRIES, MAX_RETRIES + 1)


def test_a_503_is_retried_for_reads_only() -> None:
    unavailable = httpx.Response(503, json={"detail": "database"}, headers={"Retry-After": "1"})
    client, sleeps, _ = scripted([unavailable, httpx.Response(200, json=RUN)])
    assert client.run("r1") == RUN
    assert len(sleeps) == 1
    client, sleeps, seen = scripted([unavailable, httpx.Response(200, json=RUN)])
    with pytest.raises(ApiError):
        client.cancel("r1")
    assert (sleeps, seen) == ([], ["POST /runs/r1/cancel"])


def test_many_runs_are_read_a_hundred_ids_per_request() -> None:
    ids = [f"{i:08x}-0000-0000-0000-000000000000" for i in range(250)]
    requested: list[list[str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked = request.url.params["ids"].split(",")
        requested.append(asked)
        return httpx.Response(200, json={"runs": [{"run_id": i} for i in asked[:-1]]})

    client = DocpipeClient("http://api.test", transport=httpx.MockTransport(handler))
    found = client.runs(ids)
    assert [len(chunk) for chunk in requested] == [100, 100, 50]
    assert len(found) == 247, "ids the API does not know are left out"


# --- results downloads --------------------------------------------------------------------

LINES = [f'{{"run_id": "r{i}", "custom_id": "d{i}"}}\n'.encode() for i in range(5)]
CSV = [
    b"Document,No.,Run ID,Summary\r\n",
    b'd0,0,r0,"two\nlines, and a ""quote"""\r\n',
    b"d1,1,r1,plain\r\n",
    b'd2,2,r2,"a\r\nb"\r\n',
]


class _Dropped(httpx.SyncByteStream):
    """An answer whose connection drops after ``cut`` bytes."""

    def __init__(self, body: bytes, cut: int) -> None:
        self._body, self._cut = body, cut

    def __iter__(self) -> Iterator[bytes]:
        yield self._body[: self._cut]
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


def run_id_of(record: bytes) -> str:
    if record.startswith(b"{"):
        return str(json.loads(record)["run_id"])
    return next(csv.reader(io.StringIO(record.decode(), newline="")))[2]


def resuming(
    body: list[bytes], cut: int, csv_header: bool = False
) -> tuple[DocpipeClient, list[Any]]:
    """A client whose first download drops after ``cut`` bytes; each later one answers the
    records after the ``after`` it asks for (after the header, for a CSV)."""
    header, records = (body[:1], body[1:]) if csv_header else ([], body)
    asked: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(after := request.url.params.get("after"))
        ids = [run_id_of(r) for r in records]
        answer = b"".join(header + records[ids.index(after) + 1 if after else 0 :])
        stream = _Dropped(answer, cut) if len(asked) == 1 else httpx.ByteStream(answer)
        return httpx.Response(200, stream=stream)

    client = DocpipeClient(
        "http://api.test", transport=httpx.MockTransport(handler), sleep=lambda _: None
    )
    return client, asked


@pytest.mark.parametrize("cut", [1, len(LINES[0]) + 5, len(LINES[0]) * 2, len(LINES[0]) * 4 + 1])
def test_a_dropped_download_resumes_after_the_last_whole_line(cut: int) -> None:
    client, asked = resuming(LINES, cut)
    out = io.BytesIO()
    assert client.save_batch_results("b1", out).runs == 5
    assert out.getvalue() == b"".join(LINES)
    whole = cut // len(LINES[0])
    assert asked == [None, f"r{whole - 1}" if whole else None]


@pytest.mark.parametrize(
    "cut", [10, len(CSV[0]) + 8, len(CSV[0]) + len(CSV[1]) - 3, len(CSV[0]) + len(CSV[1]) + 2]
)
def test_a_dropped_csv_download_keeps_quoted_line_ends_and_one_header(cut: int) -> None:
    client, asked = resuming(CSV, cut, csv_header=True)
    out = io.BytesIO()
    assert client.save_batch_results("b1", out, format="csv").runs == 3
    assert out.getvalue() == b"".join(CSV)
    assert len(asked) == 2


def test_a_download_that_keeps_dropping_gives_up() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Dropped(LINES[0] + LINES[1], 3))

    client = DocpipeClient(
        "http://api.test", transport=httpx.MockTransport(handler), sleep=lambda _: None
    )
    with pytest.raises(httpx.RemoteProtocolError):
        client.save_batch_results("b1", io.BytesIO())


def test_a_refused_download_is_an_api_error_and_writes_nothing() -> None:
    client, _, _ = scripted([httpx.Response(404, json={"detail": "batch b1 does not exist"})])
    out = io.BytesIO()
    with pytest.raises(ApiError, match="batch b1 does not exist"):
        client.save_batch_results("b1", out)
    assert out.getvalue() == b""
