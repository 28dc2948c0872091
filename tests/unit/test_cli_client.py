"""The CLI's API client waits out 429s as Retry-After says, a bounded number of times, with
bounded waits; it retries 503 only for reads (a write may have been done)."""

from __future__ import annotations

from collections.abc import Iterator

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
